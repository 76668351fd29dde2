#!/usr/bin/env python3
"""PyTorch reference for timing: trains the SAME GPT-2 as the engine, the way a
well-tuned PyTorch user would (bf16 autocast, flash attention through SDPA,
torch.compile, fused AdamW), so the engine's step time has an honest baseline
measured on the same GPU.

    python3 examples/benchmarks/pytorch_reference.py --model gpt2-124m --micro-batch 16 --steps 20
    python3 examples/benchmarks/pytorch_reference.py --model gpt2-1558m --micro-batch 4 --no-compile

The model matches model/gpt_params.cpp and model/transformer_block.cpp:
pre-LayerNorm blocks (eps 1e-5), learned position table of 1024 rows, fused
qkv Linear (3C) with bias, biases on every Linear, 4C MLP with tanh-GELU, final
LayerNorm, LM head tied to the token embedding, vocabulary padded to a multiple
of 128 (50257 -> 50304). Weight decay 0.1 on the 2-D tensors only (wte, wpe and
the Linear weights), as the engine's registry marks them.

The step matches examples/benchmarks/train_step_bench.cpp: zero grads, forward
with the loss, backward, clip the global gradient norm at 1.0, AdamW at lr 1e-4,
on one fixed batch of synthetic tokens; timed between device synchronisations;
median of the timed steps taken the same way (sorted[n // 2]).

FLOPs and MFU follow model/flops.h (Megatron-LM, Narayanan et al. 2021, 5.1):
    72 * B * s * l * h^2 * (1 + s / (6h) + Vp / (12 l h)),  Vp = padded vocab,
and the peak table of engine/device.cpp (H100/H200 989 TFLOP/s dense bf16).

The last line is machine-readable ("RESULT key=value ...") for gpu_bench.sh.
Nothing here needs data or network access.
"""

import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# (n_layer, n_head, n_embd) of model/gpt_config.cpp's GPT-2 presets; all have
# 1024 positions and GPT-2's 50257 BPE tokens.
PRESETS = {
    "gpt2-124m": (12, 12, 768),
    "gpt2-350m": (24, 16, 1024),
    "gpt2-774m": (36, 20, 1280),
    "gpt2-1558m": (48, 25, 1600),
}
MAX_SEQ_LEN = 1024
VOCAB_SIZE = 50257
VOCAB_PAD_MULTIPLE = 128  # GptConfig::kVocabPadMultiple

# engine/device.cpp's gpu_peak_flops_by_name, same keys in the same order
# (first substring match wins, so "L40S" is tried before "L4").
PEAK_FLOPS_BY_NAME = [
    ("H200", 989e12), ("H100", 989e12), ("GH200", 989e12), ("A100", 312e12),
    ("A10G", 125e12), ("L40S", 362e12), ("L4", 121e12), ("B200", 2250e12),
]


def padded_vocab(vocab_size):
    return (vocab_size + VOCAB_PAD_MULTIPLE - 1) // VOCAB_PAD_MULTIPLE * VOCAB_PAD_MULTIPLE


def training_flops_per_step(n_layer, n_embd, vocab_padded, batch, seq_len):
    # model/flops.cpp, term for term.
    B, s, l, h, V = float(batch), float(seq_len), float(n_layer), float(n_embd), float(vocab_padded)
    return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h))


def engine_num_parameters(n_layer, n_embd, vocab_padded, max_seq_len):
    # GptConfig::num_parameters(): padded wte (tied head) + wpe + blocks + ln_f.
    C = n_embd
    per_block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    return vocab_padded * C + max_seq_len * C + n_layer * per_block + 2 * C


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=True)  # one matmul for q, k and v, as the engine does
        self.proj = nn.Linear(n_embd, n_embd, bias=True)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.fc = nn.Linear(n_embd, 4 * n_embd, bias=True)
        self.fc_proj = nn.Linear(4 * n_embd, n_embd, bias=True)

    def forward(self, x):  # x (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)  # each (B, T, C)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        # With bf16 inputs, no mask and is_causal=True, SDPA dispatches to a
        # flash-style kernel (no T x T matrix in memory), like the engine's.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, vocab_size, max_seq_len):
        super().__init__()
        self.vocab_size = vocab_size
        self.wte = nn.Embedding(padded_vocab(vocab_size), n_embd)
        self.wpe = nn.Embedding(max_seq_len, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        # Initialisation of model/gpt_params.cpp (GPT-2's): N(0, 0.02), the
        # residual projections scaled by 1/sqrt(2L), biases 0, LayerNorm 1/0.
        # Timing does not depend on it, but a diverging loss would look odd.
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, proj_std if name.endswith("proj.weight") else std)  # proj, fc_proj
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):  # idx, targets (B, T) int64
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        # Tied LM head: the embedding table itself, no bias (the engine has none).
        logits = F.linear(x, self.wte.weight)  # (B, T, Vp)
        # The padding columns are not tokens: slice them off so the softmax runs
        # over the real 50257 entries, which is what the engine's
        # softmax_cross_entropy does (it skips columns >= vocab_size and gives
        # them zero gradient). Statistics in fp32, as in the engine.
        logits = logits[..., : self.vocab_size].float()
        return F.cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1))


def peak_flops(device_name, override_tflops):
    if override_tflops is not None:
        return override_tflops * 1e12
    for key, flops in PEAK_FLOPS_BY_NAME:
        if key in device_name:
            return flops
    return 0.0


def main():
    parser = argparse.ArgumentParser(description="Time GPT-2 training steps in PyTorch (reference for the engine).")
    parser.add_argument("--model", choices=list(PRESETS), default="gpt2-124m")
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences per step (B)")
    parser.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence (T), at most 1024")
    parser.add_argument("--grad-accum", type=int, default=1,
                        help="micro-batches per optimizer step (gradient accumulation)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=3,
                        help="untimed steps first; the first one includes torch.compile's compilation")
    parser.add_argument("--no-compile", action="store_true", help="run eagerly (no torch.compile)")
    parser.add_argument("--compile-mode", default="default",
                        choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
                        help="torch.compile mode")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="peak dense bf16 TFLOP/s for MFU (default: from the device name, H100/H200 989)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    if not 1 <= args.seq_len <= MAX_SEQ_LEN:
        parser.error(f"--seq-len must be in [1, {MAX_SEQ_LEN}] (the position table has {MAX_SEQ_LEN} rows), "
                     f"got {args.seq_len}")
    if args.micro_batch < 1 or args.steps < 1 or args.warmup_steps < 0 or args.grad_accum < 1:
        parser.error("--micro-batch, --grad-accum and --steps must be >= 1 and --warmup-steps >= 0")
    if not torch.cuda.is_available():
        sys.exit("error: torch.cuda.is_available() is False; this benchmark needs a CUDA GPU")

    n_layer, n_head, n_embd = PRESETS[args.model]
    B, T, K = args.micro_batch, args.seq_len, args.grad_accum
    Vp = padded_vocab(VOCAB_SIZE)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    device_name = torch.cuda.get_device_name(device)
    peak = peak_flops(device_name, args.peak_tflops)
    # Matmuls run in bf16 under autocast; TF32 only matters for an fp32 matmul
    # that escapes it, which would otherwise run at a fraction of the rate.
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(args.seed)

    # fp32 master weights: the module's parameters stay fp32; autocast casts
    # them to bf16 for each matmul (the engine keeps fp32 master + bf16 working copy).
    raw_model = GPT(n_layer, n_head, n_embd, VOCAB_SIZE, MAX_SEQ_LEN).to(device)
    n_params = sum(p.numel() for p in raw_model.parameters())  # parameters() counts the tied table once
    expected = engine_num_parameters(n_layer, n_embd, Vp, MAX_SEQ_LEN)
    model = raw_model if args.no_compile else torch.compile(raw_model, mode=args.compile_mode)

    # Weight decay on 2-D tensors only (matrices and embeddings), not on biases
    # or LayerNorm gains: the engine's registry (weight_decay flag) does the same.
    decay = [p for p in raw_model.parameters() if p.dim() >= 2]
    no_decay = [p for p in raw_model.parameters() if p.dim() < 2]
    # optim::AdamWConfig: betas (0.9, 0.95), eps 1e-8, weight decay 0.1; the
    # benchmark's lr is 1e-4. fused=True: one multi-tensor kernel, like the engine's.
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    params = list(raw_model.parameters())

    # One fixed batch of random tokens (seeded), reused every step as the
    # engine's benchmark does: the timing does not depend on the values.
    gen = torch.Generator(device=device).manual_seed(args.seed)
    data = torch.randint(0, VOCAB_SIZE, (B, T + 1), device=device, generator=gen)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()  # (B, T) each

    flops = training_flops_per_step(n_layer, n_embd, Vp, B * K, T)
    print(f"device: {device_name} | torch {torch.__version__} | CUDA {torch.version.cuda}")
    print(f"model: {args.model} L={n_layer} H={n_head} C={n_embd} V={VOCAB_SIZE}({Vp}) T={T} B={B} x{K} | "
          f"params {n_params / 1e6:.1f}M ({n_params})")
    if n_params != expected:
        print(f"warning: parameter count {n_params} differs from the engine's GptConfig::num_parameters() "
              f"{expected}; the two models are not the same shape")
    print(f"setup: bf16 autocast, fp32 master weights, SDPA(is_causal=True), "
          f"{'eager' if args.no_compile else 'torch.compile(mode=' + args.compile_mode + ')'}, "
          f"fused AdamW, clip 1.0, loss over the first {VOCAB_SIZE} of {Vp} logits (padding sliced off)")
    print("convention: model FLOPs/step = 72*B*s*l*h^2*(1 + s/(6h) + V/(12lh)) (Megatron-LM, Narayanan et al. "
          "2021; fwd+bwd matmuls, full s x s attention, padded V, recomputation not counted); "
          f"{flops / 1e12:.2f} TFLOP/step; peak {peak / 1e12:.0f} TFLOP/s"
          + ("" if peak else " (unknown device: pass --peak-tflops for MFU)"))

    def step():
        optimizer.zero_grad(set_to_none=True)
        for _ in range(K):  # gradient accumulation: the mean over the step's K micro-batches
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(idx, targets) / K
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss * K  # the last micro-batch's mean loss

    t0 = time.perf_counter()
    for i in range(args.warmup_steps):
        loss = step()
        torch.cuda.synchronize()
        print(f"warm-up {i + 1}/{args.warmup_steps}  {time.perf_counter() - t0:8.1f} s since start  "
              f"loss {loss.item():.4f}", flush=True)

    tokens = B * T * K
    times = []
    for i in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        times.append(dt)
        # loss.item() after the clock stops, so its copy is not timed.
        print(f"step {i + 1:3d}/{args.steps}  {dt * 1e3:8.1f} ms  {tokens / dt:9.0f} tok/s  "
              f"{flops / dt / 1e12:7.1f} TFLOP/s  loss {loss.item():.4f}", flush=True)

    median = sorted(times)[len(times) // 2]  # as train_step_bench.cpp: sorted[n / 2]
    tflops = flops / median / 1e12
    mfu = flops / median / peak if peak else float("nan")
    mem = torch.cuda.max_memory_allocated(device)
    reserved = torch.cuda.max_memory_reserved(device)
    print(f"{args.model:<10} B={B:<3d} T={T:<5d} x{K:<3d} params {n_params / 1e6:6.1f}M | step {median * 1e3:8.1f} ms "
          f"(median of {len(times)}) | {tokens / median:9.0f} tok/s | {tflops:7.1f} TFLOP/s | "
          f"MFU {100 * mfu:5.1f}% | max allocated {mem / 2**30:.2f} GiB (reserved {reserved / 2**30:.2f} GiB)")
    print(f"RESULT impl=pytorch model={args.model} B={B} T={T} grad_accum={K} params={n_params} step_ms={median * 1e3:.2f} "
          f"tok_s={tokens / median:.0f} tflops={tflops:.2f} mfu={mfu:.4f} max_alloc_gib={mem / 2**30:.2f} "
          f"compile={'no' if args.no_compile else args.compile_mode} device={device_name.replace(' ', '_')}")


if __name__ == "__main__":
    main()
