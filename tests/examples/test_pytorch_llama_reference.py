"""examples/benchmarks/pytorch_llama_reference.py on the CPU (its GPU runs are
examples/gpu/llama_check.sh's): a two-step run of llama-micro with its own
PyTorch model ends in a RESULT line with the engine's parameter count and a
loss near ln 256; its parameter and FLOP counts and its RoPE frequencies
(Llama 3's bands included) equal the engine's (the numbers below were printed
by model::GptConfig::num_parameters, model::training_flops_per_step and
model::rope_inv_freq); and, where transformers imports, its model gives the
same logits as transformers' Qwen2ForCausalLM and LlamaForCausalLM holding
the same weights. Exits 77 (skipped) without torch."""
import importlib.util
import math
import os
import subprocess
import sys
import unittest

SOURCE = os.environ.get("ENGINE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(SOURCE, "examples", "benchmarks", "pytorch_llama_reference.py")

try:
    import torch
except ImportError as e:
    torch = None
    TORCH_MISSING = str(e)


def load_reference():
    spec = importlib.util.spec_from_file_location("pytorch_llama_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# preset: (num_parameters, FLOPs of 512 sequences of 1024 tokens causal, full, sum of inv_freq, last inv_freq)
ENGINE = {
    "smollm2-135m": (134515008, 478699874942976, 534362651099136, 3.30936868, 1.43301259e-05),
    "smollm2-360m": (361821120, 1236950581248000, 1335906627747840, 3.30936868, 1.43301259e-05),
    "qwen2.5-0.5b": (494032768, 1623136860635136, 1692406093185024, 2.85210103, 1.53992653e-06),
    "qwen2.5-1.5b": (1543714304, 4994187971788800, 5132726436888576, 5.15044431, 1.24093776e-06),
    "llama3.2-1b": (1235814400, 3992876476268544, 4098429592535040, 2.96820228, 9.41830649e-08),
    "llama-micro": (35104, 289910292480, 496068722688, 1.111, 0.00100000005),
    "llama-demo": (820352, 4226247819264, 5875515260928, 2.28465711, 0.00017782794),
}


class PytorchLlamaReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ref = load_reference()

    def test_two_cpu_steps_of_the_native_model(self):
        out = subprocess.run([sys.executable, SCRIPT, "--model", "llama-micro", "--impl", "native", "--device", "cpu",
                              "--micro-batch", "2", "--seq-len", "32", "--batch-tokens", "128", "--steps", "2",
                              "--warmup-steps", "1"], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        last = out.stdout.strip().splitlines()[-1]
        self.assertTrue(last.startswith("RESULT impl=native model=llama-micro B=2 T=32 grad_accum=2 params=35104 "),
                        last)
        loss = float(last.split(" loss=")[1].split()[0])
        self.assertLess(abs(loss - math.log(256)), 0.5, last)
        self.assertNotIn("warning:", out.stdout)

    def test_batch_tokens_must_divide(self):
        out = subprocess.run([sys.executable, SCRIPT, "--model", "llama-micro", "--device", "cpu", "--micro-batch", "3",
                              "--seq-len", "32", "--batch-tokens", "128"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 2)
        self.assertIn("not a multiple of B*T = 96", out.stderr)

    def test_counts_and_frequencies_are_the_engines(self):
        self.assertEqual(set(ENGINE), set(self.ref.PRESETS))
        for name, (params, causal, full, inv_sum, inv_last) in ENGINE.items():
            m = self.ref.PRESETS[name]
            self.assertEqual(self.ref.engine_num_parameters(m), params, name)
            self.assertEqual(self.ref.training_flops_per_step(m, 512, 1024, "causal"), causal, name)
            self.assertEqual(self.ref.training_flops_per_step(m, 512, 1024, "full"), full, name)
            f = self.ref.rope_inv_freq(m).double()
            self.assertAlmostEqual(f.sum().item() / inv_sum, 1.0, delta=1e-7, msg=name)
            self.assertAlmostEqual(f[-1].item() / inv_last, 1.0, delta=1e-6, msg=name)

    def test_native_model_equals_transformers(self):
        try:
            import transformers  # noqa: F401
        except Exception as e:
            self.skipTest(f"transformers not importable: {e}")
        ref = self.ref
        cases = {
            "llama-micro": ref.PRESETS["llama-micro"],  # Qwen2: q/k/v bias, untied head, GQA
            "llama-demo": ref.PRESETS["llama-demo"],  # Llama: tied head, GQA
            # Llama 3's bands at a small shape: with an original context of 64 and d 32,
            # frequencies fall in all three bands.
            "llama3 bands": ref.llama(256, 256, 2, 4, 2, 128, 96, 500000.0, 1e-5, rope_scaling=(8.0, 1.0, 4.0, 64)),
        }
        torch.manual_seed(0)
        for name, m in cases.items():
            with self.subTest(name):
                hf, _ = ref.build_transformers(m, torch.device("cpu"), "eager")
                native = ref.NativeLlama(m, "repeat")
                with torch.no_grad():
                    # Weights far from the initial ones, so that the norms, biases and
                    # attention pattern all matter.
                    for p in hf.parameters():
                        p.copy_(torch.randn_like(p) * (1.0 if p.dim() == 1 else 0.3))
                    sd = hf.state_dict()
                    native.wte.weight.copy_(sd["model.embed_tokens.weight"])
                    for layer, b in enumerate(native.blocks):
                        p = f"model.layers.{layer}."
                        b.ln_1.weight.copy_(sd[p + "input_layernorm.weight"])
                        b.ln_2.weight.copy_(sd[p + "post_attention_layernorm.weight"])
                        b.qkv.weight.copy_(torch.cat([sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]))
                        if m.qkv_bias:
                            b.qkv.bias.copy_(torch.cat([sd[p + f"self_attn.{x}_proj.bias"] for x in "qkv"]))
                        b.proj.weight.copy_(sd[p + "self_attn.o_proj.weight"])
                        b.fc.weight.copy_(torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]]))
                        b.fc_proj.weight.copy_(sd[p + "mlp.down_proj.weight"])
                    native.ln_f.weight.copy_(sd["model.norm.weight"])
                    if native.lm_head is not None:
                        native.lm_head.weight.copy_(sd["lm_head.weight"])
                    idx = torch.randint(0, m.vocab, (2, 64))
                    want = hf(input_ids=idx, use_cache=False).logits
                    got = native(idx)
                scale = want.abs().max().item()
                self.assertGreater(scale, 1.0)
                self.assertLess((got - want).abs().max().item(), 3e-5 * scale, name)


if __name__ == "__main__":
    if torch is None:
        print(f"skipped: torch is not importable ({TORCH_MISSING})")
        sys.exit(77)
    unittest.main(verbosity=2)
