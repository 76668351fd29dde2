#!/usr/bin/env python3
"""PyTorch reference for timing the Llama family (issue 32): trains the SAME
shapes as the engine's Llama-family presets the way a PyTorch user would, so
the engine's step time has an honest baseline on the same GPU.

    python3 examples/benchmarks/pytorch_llama_reference.py --model qwen2.5-1.5b --micro-batch 8 \\
        --batch-tokens 524288 --steps 2 --warmup-steps 1
    python3 examples/benchmarks/pytorch_llama_reference.py --model llama-micro --device cpu --steps 2

Two implementations, chosen by --impl (default auto: the first that imports):
  transformers  Hugging Face's Qwen2ForCausalLM (presets with Qwen2's q/k/v
                bias) or LlamaForCausalLM (the others), built from a config
                (nothing is downloaded), attn_implementation="sdpa", no KV
                cache. What a PyTorch user training these models runs.
  native        a self-contained PyTorch model of the same architecture:
                RMSNorm (statistics in fp32), rotary embeddings by rotate-half
                (with Llama 3's frequency bands), grouped-query attention
                through scaled_dot_product_attention (enable_gqa=True where
                PyTorch has it, >= 2.5; else K and V repeated per query head),
                SwiGLU, Qwen2's q/k/v bias, tied or untied head. Like the
                engine it fuses q|k|v into one matmul and gate|up into another.
The first lines say which one ran ("impl: ...") and the RESULT line has impl=.

Precision (CUDA, the default): fp32 master weights (the module's parameters)
with bf16 autocast, as pytorch_reference.py does and as the engine keeps fp32
master weights and a bf16 working copy; the loss and its softmax in fp32.
--device cpu runs fp32 without autocast, compilation or fused AdamW: it is a
smoke test of this script, not a measurement.

The step matches examples/benchmarks/train_step_bench.cpp and
pytorch_reference.py: zero grads, forward and loss over every position of
every micro-batch (gradient accumulation: --grad-accum, or --batch-tokens
tokens a step), backward, clip the global gradient norm at 1.0, fused AdamW at
lr 1e-4 (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the 2-D tensors, as
the engine's registry marks them), on one fixed batch of synthetic tokens;
timed between device synchronisations; median of the timed steps
(sorted[n // 2]). The loss is the engine's: cross-entropy of the logits
(fp32) against given targets at all T positions, computed here rather than by
transformers' labels= (which shifts the labels and drops one position).

FLOPs and MFU follow model/flops.cpp's Llama-family count, term for term:
    6*B*s*(l*(h*(H+2KV)*d + h^2 + 3*h*F + 2*s*h*frac) + h*Vp)
(every matmul of forward and backward; frac 0.5 for the causal half of the
s x s attention square, the default here and `train`'s, 1 with
--attention-flops full; Vp the vocabulary padded to a multiple of 128), over
the peak table of engine/device.cpp (H100/H200 989 TFLOP/s dense bf16).

The last line is machine-readable ("RESULT key=value ...") for
examples/gpu/llama_check.sh. Nothing here needs data or network access.
"""

import argparse
import importlib
import math
import os
import sys
import time
from collections import namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# model/gpt_config.cpp's Llama-family presets, from each model's config.json:
# max_position_embeddings, vocab_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, hidden_size, intermediate_size, rope_theta,
# rms_norm_eps; Qwen2's q/k/v bias; tied head; Llama 3 rope scaling
# (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings).
Shape = namedtuple("Shape", "max_pos vocab L H KV C F theta eps qkv_bias tied rope_scaling")


def llama(max_pos, vocab, L, H, KV, C, F_, theta, eps, qkv_bias=False, tied=True, rope_scaling=None):
    return Shape(max_pos, vocab, L, H, KV, C, F_, theta, eps, qkv_bias, tied, rope_scaling)


PRESETS = {
    "smollm2-135m": llama(8192, 49152, 30, 9, 3, 576, 1536, 100000.0, 1e-5),
    "smollm2-360m": llama(8192, 49152, 32, 15, 5, 960, 2560, 100000.0, 1e-5),
    "qwen2.5-0.5b": llama(32768, 151936, 24, 14, 2, 896, 4864, 1e6, 1e-6, qkv_bias=True),
    "qwen2.5-1.5b": llama(32768, 151936, 28, 12, 2, 1536, 8960, 1e6, 1e-6, qkv_bias=True),
    "llama3.2-1b": llama(131072, 128256, 16, 32, 8, 2048, 8192, 500000.0, 1e-5,
                         rope_scaling=(32.0, 1.0, 4.0, 8192)),
    # The engine's test and demo shapes (byte vocabulary): llama-micro has every
    # feature the family adds (GQA, q/k/v bias, untied head); this script's
    # CPU smoke test runs it.
    "llama-micro": llama(64, 256, 2, 4, 2, 32, 64, 10000.0, 1e-5, qkv_bias=True, tied=False),
    "llama-demo": llama(128, 256, 4, 4, 2, 128, 384, 10000.0, 1e-5),
}
# The GPT-2 baseline's peak table (engine/device.cpp's) and vocabulary padding, shared.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_reference import PEAK_FLOPS_BY_NAME, VOCAB_PAD_MULTIPLE, padded_vocab, peak_flops  # noqa: E402,F401


def training_flops_per_step(m, sequences, seq_len, attention="causal"):
    # model/flops.cpp, training_flops_per_step for is_llama(), term for term:
    # 3 x forward, 2 FLOPs per multiply-add; per token l * (weights + core) + head.
    B, s, l, h = float(sequences), float(seq_len), float(m.L), float(m.C)
    d = m.C // m.H
    frac = 0.5 if attention == "causal" else 1.0
    weights = h * (m.H + 2 * m.KV) * d + h * h + h * 2 * m.F + m.F * h  # qkv, proj, gate|up, down
    core = 2.0 * s * h * frac  # q k^T and P v, all heads
    return 3.0 * 2.0 * B * s * (l * (weights + core) + h * padded_vocab(m.vocab))


def engine_num_parameters(m):
    # GptConfig::num_parameters() for is_llama().
    C, Vp, d = m.C, padded_vocab(m.vocab), m.C // m.H
    qkv = (m.H + 2 * m.KV) * d
    per_block = C + qkv * C + (qkv if m.qkv_bias else 0) + C * C + C + 3 * m.F * C
    return Vp * C * (1 if m.tied else 2) + m.L * per_block + C


def torch_version():
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # PyTorch >= 2.0
HAS_ENABLE_GQA = HAS_SDPA and torch_version() >= (2, 5)


# ---- the native implementation -----------------------------------------------------------
def rope_inv_freq(m):
    """Inverse frequencies of the rotary embedding (d/2,), fp32, with Llama 3's
    bands when the preset has them (transformers' _compute_llama3_parameters)."""
    d = m.C // m.H
    inv_freq = 1.0 / (m.theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if m.rope_scaling is not None:
        factor, low, high, original = m.rope_scaling
        low_wavelen, high_wavelen = original / low, original / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    return inv_freq.float()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):  # statistics in fp32 whatever x is, as transformers' and the engine's
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class Block(nn.Module):
    def __init__(self, m, gqa):
        super().__init__()
        self.H, self.KV, self.d, self.F = m.H, m.KV, m.C // m.H, m.F
        self.gqa = gqa  # "enable_gqa" | "repeat"
        self.ln_1 = RMSNorm(m.C, m.eps)
        # q | k | v in one matmul ((H + 2 KV) d outputs), as the engine's attn.qkv.
        self.qkv = nn.Linear(m.C, (m.H + 2 * m.KV) * self.d, bias=m.qkv_bias)
        self.proj = nn.Linear(m.C, m.C, bias=False)
        self.ln_2 = RMSNorm(m.C, m.eps)
        self.fc = nn.Linear(m.C, 2 * m.F, bias=False)  # gate | up, as the engine's mlp.fc
        self.fc_proj = nn.Linear(m.F, m.C, bias=False)  # down

    def attention(self, q, k, v):  # q (B, H, T, d), k and v (B, KV, T, d)
        if self.gqa == "enable_gqa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        g = self.H // self.KV  # query heads per key/value head: head h reads kv head h // g
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        if HAS_SDPA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # PyTorch < 2.0 (the CPU smoke test on an old torch): the plain product.
        T = q.shape[2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(scores.float().masked_fill(mask, float("-inf")), dim=-1).to(v.dtype) @ v

    def forward(self, x, cos, sin):  # x (B, T, C); cos, sin (T, d)
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split([self.H * self.d, self.KV * self.d, self.KV * self.d], dim=2)
        q = q.view(B, T, self.H, self.d).transpose(1, 2)  # (B, H, T, d)
        k = k.view(B, T, self.KV, self.d).transpose(1, 2)  # (B, KV, T, d)
        v = v.view(B, T, self.KV, self.d).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = self.attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        gate, up = self.fc(self.ln_2(x)).split(self.F, dim=2)
        return x + self.fc_proj(F.silu(gate) * up)


class NativeLlama(nn.Module):
    def __init__(self, m, gqa):
        super().__init__()
        self.vocab = m.vocab
        Vp = padded_vocab(m.vocab)
        self.wte = nn.Embedding(Vp, m.C)
        self.blocks = nn.ModuleList([Block(m, gqa) for _ in range(m.L)])
        self.ln_f = RMSNorm(m.C, m.eps)
        self.lm_head = None if m.tied else nn.Linear(m.C, Vp, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(m), persistent=False)
        # model/gpt_params.cpp's initialisation: N(0, 0.02), the output
        # projections scaled by 1/sqrt(2L), biases 0, norm gains 1.
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * m.L)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, proj_std if name.endswith("proj.weight") else std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):  # idx (B, T) -> logits (B, T, Vp)
        T = idx.shape[1]
        # fp32 (an elementwise product: autocast leaves it alone), as transformers computes them.
        angles = torch.arange(T, device=idx.device, dtype=torch.float32)[:, None] * self.inv_freq[None, :]  # (T, d/2)
        angles = torch.cat((angles, angles), dim=-1)  # (T, d): rotate-half pairs i with i + d/2
        cos, sin = angles.cos(), angles.sin()
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x, cos, sin)
        x = self.ln_f(x)
        return F.linear(x, self.wte.weight) if self.lm_head is None else self.lm_head(x)


# ---- the transformers implementation -------------------------------------------------------
def build_transformers(m, device, attn_implementation):
    """Qwen2ForCausalLM or LlamaForCausalLM from a config (no download), SDPA
    attention (unless told otherwise), fp32 parameters. Returns (model, description)."""
    import transformers

    Vp = padded_vocab(m.vocab)
    if m.qkv_bias:  # Qwen2: a bias on q, k and v only
        config_cls, name = transformers.Qwen2Config, "Qwen2ForCausalLM"
        extra = dict(use_sliding_window=False)
    else:  # Llama: no bias anywhere
        config_cls, name = transformers.LlamaConfig, "LlamaForCausalLM"
        extra = dict(attention_bias=False, mlp_bias=False, head_dim=m.C // m.H)
    kwargs = dict(vocab_size=Vp, hidden_size=m.C, intermediate_size=m.F, num_hidden_layers=m.L,
                  num_attention_heads=m.H, num_key_value_heads=m.KV, max_position_embeddings=m.max_pos,
                  rms_norm_eps=m.eps, tie_word_embeddings=m.tied, use_cache=False, hidden_act="silu",
                  initializer_range=0.02, **extra)
    rope = dict(rope_type="default")
    if m.rope_scaling is not None:
        factor, low, high, original = m.rope_scaling
        rope = dict(rope_type="llama3", factor=factor, low_freq_factor=low, high_freq_factor=high,
                    original_max_position_embeddings=original)
    # transformers 5 holds RoPE's settings in rope_parameters (theta included);
    # 4.x in rope_theta and rope_scaling.
    if hasattr(config_cls(), "rope_parameters"):
        kwargs["rope_parameters"] = dict(rope, rope_theta=m.theta)
    else:
        kwargs["rope_theta"] = m.theta
        if m.rope_scaling is not None:
            kwargs["rope_scaling"] = rope
    try:
        config = config_cls(**kwargs)
    except TypeError as e:  # a version without one of the optional fields (head_dim, mlp_bias)
        for key in ("head_dim", "mlp_bias"):
            kwargs.pop(key, None)
        print(f"note: {config_cls.__name__}({e}); retried without head_dim/mlp_bias")
        config = config_cls(**kwargs)

    def make():
        try:
            return transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
        except Exception as e:  # a version whose from_config takes no attn_implementation
            print(f"note: AutoModelForCausalLM.from_config failed ({type(e).__name__}: {e}); {name}(config) instead")
            config._attn_implementation = attn_implementation
            return getattr(transformers, name)(config)

    try:
        # Built on the device (fast initialisation); fp32 below: the master weights.
        with torch.device(device):
            model = make()
    except TypeError as e:  # PyTorch < 2.0: torch.device is no context manager
        print(f"note: building on {device} directly failed ({e}); built on the CPU and moved")
        model = make()
    model = model.to(device=device, dtype=torch.float32)
    if type(model).__name__ != name:
        print(f"warning: transformers built {type(model).__name__}, not {name}")
    attn = getattr(model.config, "_attn_implementation", "?")
    if attn != attn_implementation:
        print(f"warning: attention implementation is {attn!r}, not {attn_implementation!r}")
    rope_seen = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None)
    desc = (f"transformers {transformers.__version__} {type(model).__name__} from a config "
            f"(attn_implementation={attn}, use_cache=False, rope {rope_seen or 'default theta ' + str(m.theta)})")
    if m.tied and model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        print("warning: the preset ties the head to the embedding but the model's lm_head is a separate tensor")
    return model, desc


def main():
    parser = argparse.ArgumentParser(
        description="Time Llama-family training steps in PyTorch (reference for the engine).")
    parser.add_argument("--model", choices=list(PRESETS), default="qwen2.5-1.5b")
    parser.add_argument("--impl", choices=["auto", "transformers", "native"], default="auto",
                        help="transformers' Qwen2/Llama model, or this file's own (auto: transformers if importable)")
    parser.add_argument("--attn-implementation", default="sdpa",
                        help="transformers' attn_implementation (default sdpa; eager where this torch has no SDPA)")
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per micro-batch (B)")
    parser.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence (T)")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--batch-tokens", type=int, default=0,
                        help="tokens per optimizer step; sets --grad-accum to batch-tokens / (B T), which must divide")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=2,
                        help="untimed steps first; the first one includes torch.compile's compilation")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: an fp32 smoke test of this script (no autocast, no compile, no fused AdamW)")
    parser.add_argument("--no-compile", action="store_true", help="run eagerly (no torch.compile)")
    parser.add_argument("--compile-mode", default="default",
                        choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
    parser.add_argument("--attention-flops", choices=["causal", "full"], default="causal",
                        help="attention FLOPs in MFU: the causal half of s x s (model/flops.h's default) or the square")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="peak dense bf16 TFLOP/s for MFU (default: from the device name, H100/H200 989)")
    parser.add_argument("--kernels", type=int, default=0,
                        help="after the timed steps, profile one micro-batch (forward+backward) and print its N "
                             "costliest CUDA kernels (which attention kernel SDPA chose, among others); 0: off")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    m = PRESETS[args.model]
    B, T = args.micro_batch, args.seq_len
    if B < 1 or args.steps < 1 or args.warmup_steps < 0 or args.grad_accum < 1 or not 1 <= T <= m.max_pos:
        parser.error(f"need --micro-batch, --grad-accum, --steps >= 1, --warmup-steps >= 0 and "
                     f"1 <= --seq-len <= {m.max_pos} ({args.model}'s positions)")
    K = args.grad_accum
    if args.batch_tokens:
        if args.batch_tokens % (B * T):
            parser.error(f"--batch-tokens {args.batch_tokens} is not a multiple of B*T = {B * T}")
        K = args.batch_tokens // (B * T)
    on_cuda = args.device == "cuda"
    if on_cuda and not torch.cuda.is_available():
        sys.exit("error: torch.cuda.is_available() is False; this benchmark needs a CUDA GPU "
                 "(--device cpu for a smoke test)")

    impl = args.impl
    if impl == "auto":
        try:
            importlib.import_module("transformers")  # whether it imports is all we ask here
            impl = "transformers"
        except Exception as e:  # ImportError, or a transformers too new for this torch
            print(f"note: transformers not importable ({type(e).__name__}: {e}); using the native implementation")
            impl = "native"

    if on_cuda:
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        device_name = torch.cuda.get_device_name(device)
        # Matmuls run in bf16 under autocast; TF32 only for an fp32 one that escapes it.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
        device_name = "cpu"
    peak = peak_flops(device_name, args.peak_tflops) if on_cuda else (args.peak_tflops or 0) * 1e12
    torch.manual_seed(args.seed)

    if impl == "transformers":
        try:
            raw_model, impl_desc = build_transformers(m, device, args.attn_implementation)
        except Exception as e:
            if args.impl == "transformers":
                raise
            # --impl auto: a transformers this script does not know how to drive; say so and go on.
            print(f"warning: transformers' model could not be built ({type(e).__name__}: {e}); "
                  "using the native implementation")
            impl = "native"
    if impl == "native":
        gqa = "enable_gqa" if HAS_ENABLE_GQA else "repeat"
        try:
            with torch.device(device):  # initialised on the device: seconds, not a minute, at 1.5B
                raw_model = NativeLlama(m, gqa)
        except TypeError:  # PyTorch < 2.0: torch.device is no context manager
            raw_model = NativeLlama(m, gqa).to(device)
        if gqa == "enable_gqa":
            attention = "SDPA enable_gqa=True"
        else:
            attention = "K/V repeat_interleave + " + ("SDPA" if HAS_SDPA else "a plain causal softmax (no SDPA)")
        impl_desc = (f"native PyTorch (RMSNorm, RoPE rotate-half, fused q|k|v and gate|up, GQA via {attention}, "
                     f"SwiGLU{', q/k/v bias' if m.qkv_bias else ''}, {'tied' if m.tied else 'untied'} head)")
    n_params = sum(p.numel() for p in raw_model.parameters())  # parameters() counts a tied table once
    expected = engine_num_parameters(m)

    compile_note = "eager"
    model = raw_model
    if not on_cuda:
        compile_note = "eager (cpu smoke test)"
    elif args.no_compile:
        compile_note = "eager (--no-compile)"
    elif not hasattr(torch, "compile"):
        compile_note = "eager (this torch has no torch.compile)"
    else:
        model = torch.compile(raw_model, mode=args.compile_mode)
        compile_note = f"torch.compile(mode={args.compile_mode})"

    # Weight decay on 2-D tensors only (matrices and embeddings), not on norm
    # gains or biases: the engine's registry (model/gpt_params.cpp) does the same.
    decay = [p for p in raw_model.parameters() if p.dim() >= 2]
    no_decay = [p for p in raw_model.parameters() if p.dim() < 2]
    adamw_kwargs = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    fused = on_cuda and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames
    if fused:
        adamw_kwargs["fused"] = True  # one multi-tensor kernel, like the engine's
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], **adamw_kwargs)
    params = list(raw_model.parameters())

    # One fixed micro-batch of random tokens (seeded), reused by every
    # micro-batch of every step, as the engine's benchmark does.
    gen = torch.Generator(device=device).manual_seed(args.seed)
    data = torch.randint(0, m.vocab, (B, T + 1), device=device, generator=gen)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()  # (B, T) each
    V = m.vocab

    def loss_of(idx, targets):
        if impl == "transformers":
            logits = model(input_ids=idx, use_cache=False).logits
        else:
            logits = model(idx)
        # Real vocabulary only (the padding columns are not tokens), statistics in fp32, as the engine's.
        logits = logits[..., :V].float()
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if on_cuda else None

    def micro_step():
        if autocast is not None:
            with autocast():
                loss = loss_of(idx, targets) / K
        else:
            loss = loss_of(idx, targets) / K
        loss.backward()
        return loss

    def step():
        optimizer.zero_grad(set_to_none=True)
        for _ in range(K):  # gradient accumulation: the mean over the step's K micro-batches
            loss = micro_step()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss * K  # the last micro-batch's mean loss

    def sync():
        if on_cuda:
            torch.cuda.synchronize()

    flops = training_flops_per_step(m, B * K, T, args.attention_flops)
    other = "full" if args.attention_flops == "causal" else "causal"
    other_flops = training_flops_per_step(m, B * K, T, other)
    d = m.C // m.H
    print(f"device: {device_name} | torch {torch.__version__} | CUDA {torch.version.cuda}")
    print(f"impl: {impl} | {impl_desc}")
    print(f"model: {args.model} L={m.L} H={m.H} KV={m.KV} d={d} C={m.C} F={m.F} V={m.vocab}({padded_vocab(m.vocab)}) "
          f"theta={m.theta:g} eps={m.eps:g} qkv_bias={m.qkv_bias} tied={m.tied}"
          + (f" llama3_rope={m.rope_scaling}" if m.rope_scaling else "")
          + f" | T={T} B={B} x{K} ({B * T * K} tokens a step) | params {n_params / 1e6:.1f}M ({n_params})")
    if n_params != expected:
        print(f"warning: parameter count {n_params} differs from the engine's GptConfig::num_parameters() "
              f"{expected}; the two models are not the same shape")
    precision = "bf16 autocast, fp32 master weights" if on_cuda else "fp32 (no autocast)"
    print(f"setup: {precision}, {compile_note}, {'fused' if fused else 'unfused'} AdamW (lr 1e-4, wd 0.1 on 2-D), "
          f"clip 1.0, fp32 cross-entropy over the first {V} logits")
    print("convention: model FLOPs/step = 6*B*s*(l*(h*(H+2KV)*d + h^2 + 3*h*F + 2*s*h*frac) + h*Vp) "
          "(model/flops.cpp's Llama count: every matmul of forward and backward; "
          f"frac {0.5 if args.attention_flops == 'causal' else 1}, {args.attention_flops} attention); "
          f"{flops / 1e12:.2f} TFLOP/step ({other}: {other_flops / 1e12:.2f}); peak {peak / 1e12:.0f} TFLOP/s"
          + ("" if peak else " (unknown device: pass --peak-tflops for MFU)"))

    t0 = time.perf_counter()
    for i in range(args.warmup_steps):
        loss = step()
        sync()
        print(f"warm-up {i + 1}/{args.warmup_steps}  {time.perf_counter() - t0:8.1f} s since start  "
              f"loss {loss.item():.4f}", flush=True)

    tokens = B * T * K
    times = []
    for i in range(args.steps):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        dt = time.perf_counter() - t0
        times.append(dt)
        # loss.item() after the clock stops, so its copy is not timed.
        print(f"step {i + 1:3d}/{args.steps}  {dt * 1e3:9.1f} ms  {tokens / dt:9.0f} tok/s  "
              f"{flops / dt / 1e12:7.1f} TFLOP/s  loss {loss.item():.4f}", flush=True)

    if args.kernels > 0 and on_cuda:
        # One micro-batch under the profiler (untimed): which kernels ran, the
        # attention ones (flash / cuDNN / memory-efficient) named among them.
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                micro_step()
                sync()
            optimizer.zero_grad(set_to_none=True)
            averages = prof.key_averages()
            attr = "device_time_total" if hasattr(averages[0], "device_time_total") else "cuda_time_total"
            rows = sorted(averages, key=lambda e: getattr(e, attr), reverse=True)
            total = sum(getattr(e, attr) for e in rows) or 1.0
            print(f"kernels of one micro-batch (forward+backward, torch.profiler; "
                  f"{total / 1e3:.1f} ms of kernel time):")
            for e in rows[:args.kernels]:
                t = getattr(e, attr)
                print(f"    {t / 1e3:9.2f} ms {100 * t / total:5.1f}%  {e.count:5d}x  {e.key[:110]}")
            names = ("flash", "fmha", "cudnn", "attention", "sdpa")
            attn = [e.key for e in rows if any(n in e.key.lower() for n in names)]
            print("attention kernels: " + ("; ".join(k[:80] for k in attn[:4]) if attn else "none named so"))
        except Exception as e:  # the profile is a bonus: never lose the result line to it
            print(f"kernels: the profiler failed ({type(e).__name__}: {e})")

    median = sorted(times)[len(times) // 2]  # as train_step_bench.cpp: sorted[n / 2]
    tflops = flops / median / 1e12
    mfu = flops / median / peak if peak else float("nan")
    mem = torch.cuda.max_memory_allocated(device) if on_cuda else 0
    reserved = torch.cuda.max_memory_reserved(device) if on_cuda else 0
    print(f"{args.model:<12} B={B:<3d} T={T:<5d} x{K:<3d} params {n_params / 1e6:7.1f}M | step {median * 1e3:9.1f} ms "
          f"(median of {len(times)}) | {tokens / median:9.0f} tok/s | {tflops:7.1f} TFLOP/s ({args.attention_flops}; "
          f"{other}: {other_flops / median / 1e12:.1f}) | MFU {100 * mfu:5.1f}% | max allocated {mem / 2**30:.2f} GiB "
          f"(reserved {reserved / 2**30:.2f} GiB)")
    print(f"RESULT impl={impl} model={args.model} B={B} T={T} grad_accum={K} params={n_params} "
          f"step_ms={median * 1e3:.2f} tok_s={tokens / median:.0f} tflops={tflops:.2f} mfu={mfu:.4f} "
          f"attention_flops={args.attention_flops} max_alloc_gib={mem / 2**30:.2f} "
          f"compile={'no' if model is raw_model else args.compile_mode} loss={loss.item():.4f} "
          f"device={device_name.replace(' ', '_')}")


if __name__ == "__main__":
    main()
