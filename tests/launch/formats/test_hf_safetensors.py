"""`train --save-hf` read by the safetensors format's own rules, with numpy only
(no torch, no transformers): the header's length, JSON, padding, dtypes and
offsets, and every tensor's bytes equal to the weights of the llm.c model file
the same run wrote, in GPT-2's Conv1D layout and unpadded vocabulary.

Run by CTest (tests/launch/formats/CMakeLists.txt) with ENGINE_TRAIN_BIN set."""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np

TRAIN = os.environ.get("ENGINE_TRAIN_BIN", "build/launch/train")
VOCAB = 200  # padded to 256 by the engine
L, C, T = 2, 32, 64


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def read_llmc(path):
    """llm.c's model file: 256 int32 header, then the tensors in llm.c's order."""
    raw = np.fromfile(path, dtype="<f4")
    header = raw[:256].view("<i4")
    assert header[0] == 20240326 and header[1] == 3, header[:2]
    maxT, V, nl, nh, C_, Vp = (int(x) for x in header[2:8])
    shapes = [("wte", (Vp, C_)), ("wpe", (maxT, C_))]
    per_layer = [("ln_1.weight", (C_,)), ("ln_1.bias", (C_,)), ("qkv.weight", (3 * C_, C_)), ("qkv.bias", (3 * C_,)),
                 ("attn_proj.weight", (C_, C_)), ("attn_proj.bias", (C_,)), ("ln_2.weight", (C_,)), ("ln_2.bias", (C_,)),
                 ("fc.weight", (4 * C_, C_)), ("fc.bias", (4 * C_,)), ("mlp_proj.weight", (C_, 4 * C_)),
                 ("mlp_proj.bias", (C_,))]
    shapes += [(name, (nl,) + shape) for name, shape in per_layer]
    shapes += [("ln_f.weight", (C_,)), ("ln_f.bias", (C_,))]
    out, at = {}, 256
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = raw[at:at + n].reshape(shape)
        at += n
    assert at == raw.size, (at, raw.size)
    return out, V


def parse_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header_text = data[8:8 + n].decode("utf-8")
    header = json.loads(header_text)
    return n, header_text, header, data[8 + n:]


def expected_tensors(llmc, V):
    """The engine's weights as GPT-2 names them and Conv1D lays them out."""
    e = {"transformer.wte.weight": llmc["wte"][:V], "transformer.wpe.weight": llmc["wpe"],
         "transformer.ln_f.weight": llmc["ln_f.weight"], "transformer.ln_f.bias": llmc["ln_f.bias"]}
    renames = {"ln_1.weight": "ln_1.weight", "ln_1.bias": "ln_1.bias", "qkv.weight": "attn.c_attn.weight",
               "qkv.bias": "attn.c_attn.bias", "attn_proj.weight": "attn.c_proj.weight", "attn_proj.bias": "attn.c_proj.bias",
               "ln_2.weight": "ln_2.weight", "ln_2.bias": "ln_2.bias", "fc.weight": "mlp.c_fc.weight",
               "fc.bias": "mlp.c_fc.bias", "mlp_proj.weight": "mlp.c_proj.weight", "mlp_proj.bias": "mlp.c_proj.bias"}
    for ours, theirs in renames.items():
        for l in range(llmc[ours].shape[0]):
            value = llmc[ours][l]
            e[f"transformer.h.{l}.{theirs}"] = value.T if value.ndim == 2 else value  # Linear (out, in) -> Conv1D (in, out)
    return e


def bf16_bits(x):
    """fp32 -> bf16 bits, round to nearest even (as the engine writes them)."""
    bits = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


class SaveHf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.dir = cls.tmp.name
        rng = np.random.default_rng(0)
        write_shard(os.path.join(d, "train.bin"), rng.integers(0, VOCAB, 4000))
        common = [TRAIN, "--model", "gpt-micro", "--vocab-size", str(VOCAB), "--micro-batch", "2", "--seq-len", "16",
                  "--steps", "3", "--device", "cpu", "--peak-tflops", "1", "--train-data", os.path.join(d, "train.bin")]
        for dtype in ("fp32", "bf16"):
            subprocess.run(common + ["--save-model", os.path.join(d, f"model_{dtype}.bin"),
                                     "--save-hf", os.path.join(d, f"hf_{dtype}"), "--save-hf-dtype", dtype],
                           check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_folder(self, dtype):
        llmc, V = read_llmc(os.path.join(self.dir, f"model_{dtype}.bin"))
        self.assertEqual(V, VOCAB)
        n, text, header, body = parse_safetensors(os.path.join(self.dir, f"hf_{dtype}", "model.safetensors"))
        self.assertEqual(n % 8, 0, "the header is padded to a multiple of 8 bytes")
        self.assertEqual(header.pop("__metadata__"), {"format": "pt"})
        expected = expected_tensors(llmc, V)
        self.assertEqual(set(header), set(expected))
        self.assertNotIn("lm_head.weight", header)  # tied to wte
        # Offsets: contiguous, in order, covering the whole data section.
        spans = sorted(tuple(v["data_offsets"]) for v in header.values())
        self.assertEqual(spans[0][0], 0)
        for (a, b), (c, _) in zip(spans, spans[1:]):
            self.assertEqual(b, c)
        self.assertEqual(spans[-1][1], len(body))
        code, size = {"fp32": ("F32", 4), "bf16": ("BF16", 2)}[dtype]
        for name, want in expected.items():
            entry = header[name]
            self.assertEqual(entry["dtype"], code, name)
            self.assertEqual(tuple(entry["shape"]), want.shape, name)
            begin, end = entry["data_offsets"]
            self.assertEqual(end - begin, want.size * size, name)
            got = body[begin:end]
            want_bytes = (np.ascontiguousarray(want, dtype="<f4").tobytes() if dtype == "fp32"
                          else bf16_bits(want).tobytes())
            self.assertEqual(got, want_bytes, name)
        return header

    def test_fp32_bytes_equal_the_llmc_weights_in_conv1d_layout(self):
        header = self.check_folder("fp32")
        self.assertEqual(header["transformer.wte.weight"]["shape"], [VOCAB, C])
        self.assertEqual(header["transformer.h.1.attn.c_attn.weight"]["shape"], [C, 3 * C])
        self.assertEqual(header["transformer.h.0.mlp.c_proj.weight"]["shape"], [4 * C, C])

    def test_bf16_bytes_are_the_rounded_weights(self):
        self.check_folder("bf16")

    def test_config_json_is_gpt2s(self):
        for dtype, torch_dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
            config = json.load(open(os.path.join(self.dir, f"hf_{dtype}", "config.json")))
            self.assertEqual(config["model_type"], "gpt2")
            self.assertEqual(config["architectures"], ["GPT2LMHeadModel"])
            self.assertEqual((config["n_layer"], config["n_embd"], config["vocab_size"]), (L, C, VOCAB))
            self.assertEqual(config["n_positions"], T)
            self.assertEqual(config["n_ctx"], T)
            self.assertEqual(config["activation_function"], "gelu_new")
            self.assertEqual(config["layer_norm_epsilon"], 1e-5)
            self.assertTrue(config["tie_word_embeddings"])
            self.assertEqual(config["torch_dtype"], torch_dtype)

    def test_init_from_the_folder_trains_on(self):
        out = subprocess.run([TRAIN, "--model", "gpt-micro", "--vocab-size", str(VOCAB), "--micro-batch", "2",
                              "--seq-len", "16", "--steps", "1", "--device", "cpu", "--peak-tflops", "1",
                              "--train-data", os.path.join(self.dir, "train.bin"),
                              "--init-from", os.path.join(self.dir, "hf_fp32")],
                             capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
