"""Llama-family folders (Llama, Qwen2) against transformers, for
examples/hf/check_transformers.py, which passes itself as `h` for its helpers
(check, compare, run_engine, sequences, hf_loss) and constants (T, B, VOCAB).

For each random small model below (every tensor perturbed, so a swapped,
transposed or misplaced row shows), written by save_pretrained:

  import   `train --init-from DIR` with no --model: the architecture and shape
           come from config.json. Its step-1 training loss (before any update)
           and its --eval-only validation loss equal transformers' on the same
           sequences; so does the step-1 gradient norm.
  train    N steps of AdamW in the engine and in torch (torch.optim.AdamW with
           the engine's hyperparameters: decay on 2-D tensors only, global-norm
           clipping, the engine's cosine schedule), on the same batches: each
           step's loss, gradient norm and learning rate agree, and so do the
           final weights (the engine's `--save-hf` folder against torch's).
  export   that `--save-hf` folder loads into the same transformers class with
           nothing missing or unexpected, tied or untied as the model was, and
           transformers' validation loss on it equals the engine's last one.

The engine prints losses, not logits, so losses and gradient norms are what is
compared. Tolerances: relative 1e-5 where both compute the same weights in
fp32 (summation order differs). The weights after N steps: 99.9% of them
within 1e-6 of torch's, every one within 1e-4 (a tenth of lr = 1e-3, the most
one AdamW step moves a weight). Not all within 1e-6, because Adam divides a
gradient by its own running size: where the gradient is rounding noise (a k
bias's is zero in exact arithmetic, as softmax ignores a shift shared by all
scores; a saturated SiLU gate's is close to it) it still moves the weight by
up to about lr, and each side's noise differs (measured: up to 3.3e-5 over 10
steps, in a gate row of qwen2-bias-tied).
"""
import json
import os

import torch

# Each: model_type and its config (the vocabulary is the script's VOCAB).
# Heads of 8 or 16; GQA (H 4, KV 2), MQA (KV 1), H 6 over KV 2; tied and
# untied heads; Qwen2's q/k/v bias; Llama 3 rope scaling where a head of 16
# has frequencies on both sides of and inside the interpolated band.
MODELS = {
    "llama-gqa-untied": ("llama", dict(hidden_size=32, intermediate_size=72, num_attention_heads=4,
                                       num_key_value_heads=2, num_hidden_layers=2, tie_word_embeddings=False,
                                       rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=64)),
    "llama3-scaled-mqa-tied": ("llama", dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                             num_key_value_heads=1, num_hidden_layers=2, tie_word_embeddings=True,
                                             rms_norm_eps=1e-6, rope_theta=500000.0, max_position_embeddings=4096,
                                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 512})),
    "qwen2-bias-tied": ("qwen2", dict(hidden_size=48, intermediate_size=64, num_attention_heads=6,
                                      num_key_value_heads=2, num_hidden_layers=2, tie_word_embeddings=True,
                                      rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=64)),
    "qwen2-bias-untied": ("qwen2", dict(hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                        num_key_value_heads=2, num_hidden_layers=3, tie_word_embeddings=False,
                                        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=64)),
}
# The engine's AdamW as the script runs it (and torch's copy of it).
LR, MIN_LR_RATIO, BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.1, (0.9, 0.95), 1e-8, 0.1, 1.0
WEIGHT_ATOL, WEIGHT_ATOL_999 = 1e-4, 1e-6  # every weight; 99.9% of them


def random_model(h, kind, config):
    import transformers
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[kind]
    extra = dict(use_sliding_window=False) if kind == "qwen2" else dict(attention_bias=False, mlp_bias=False)
    torch.manual_seed(0)
    model = cls[1](cls[0](vocab_size=h.VOCAB, hidden_act="silu", attention_dropout=0.0, bos_token_id=None,
                          eos_token_id=None, **extra, **config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # RMSNorm gains around 1
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def lr_at(step, steps):
    """optim/lr_schedule.cpp's cosine, no warm-up, for 0-based `step`."""
    import math
    min_lr = LR * MIN_LR_RATIO
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * step / max(1, steps))) * (LR - min_lr)


def torch_train(model, batches, steps):
    """AdamW as the engine runs it: weight decay on 2-D tensors only, the
    global gradient norm clipped to GRAD_CLIP; returns each step's (loss,
    gradient norm before clipping, lr)."""
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
    out = []
    for step in range(steps):
        inputs, targets = batches[step]
        logits = model(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP).item()
        lr = lr_at(step, steps)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        out.append((loss.item(), norm, lr))
    model.eval()
    return out


def load_folder(h, folder):
    import transformers
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True,
                                                                    **{key: torch.float32})
    return model.eval(), {k: v for k, v in info.items() if v}


def is_tied(model):
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def check_model(h, args, name, kind, config, train_bin, val_bin):
    print(f"== {name}: {kind}, {json.dumps(config)}", flush=True)
    model = random_model(h, kind, config)
    folder = os.path.join(args.work, name)
    model.save_pretrained(folder)
    paths = [("whole", folder)]
    if kind == "qwen2":  # save_pretrained's shards of a larger model
        sharded = folder + "_sharded"
        model.save_pretrained(sharded, max_shard_size="40KB")
        index = os.path.join(sharded, "model.safetensors.index.json")
        shards = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else []
        h.check(len(shards) >= 2, f"save_pretrained(max_shard_size='40KB') wrote an index and {len(shards)} shards")
        paths.append(("sharded", sharded))

    train_tokens, val_all = h.read_shard(train_bin), h.read_shard(val_bin)
    steps = args.llama_steps
    batches = [h.sequences(train_tokens, s * h.B, h.B) for s in range(steps)]  # --shuffle false
    val = h.sequences(val_all, 0, min(args.val_tokens // h.T, (len(val_all) - 1) // h.T))
    theirs_train, theirs_val = h.hf_loss(model, *batches[0]), h.hf_loss(model, *val)
    results = {}
    for label, path in paths:
        # No --model: the architecture and shape come from config.json.
        records = h.run_engine(args, "--micro-batch", h.B, "--seq-len", h.T, "--steps", 1, "--shuffle", "false",
                               "--train-data", train_bin, "--init-from", path)
        step1 = next(r for r in records if r.get("step") == 1 and "loss" in r)["loss"]
        h.compare(f"{name} --init-from {label}: step-1 training loss (before the update)", step1, theirs_train,
                  h.FP32_RTOL)
        engine_val = h.engine_eval(args, [], path, val_bin, args.val_tokens)
        h.compare(f"{name} --init-from {label}: --eval-only validation loss", engine_val, theirs_val, h.FP32_RTOL)
        results[f"{name}_{label}"] = {"engine_step1": step1, "hf_step1": theirs_train, "engine_val": engine_val,
                                      "hf_val": theirs_val}

    out = folder + "_trained"
    records = h.run_engine(args, "--micro-batch", h.B, "--seq-len", h.T, "--steps", steps, "--shuffle", "false",
                           "--train-data", train_bin, "--val-data", val_bin, "--val-tokens", args.val_tokens,
                           "--init-from", folder, "--lr", LR, "--min-lr-ratio", MIN_LR_RATIO, "--lr-schedule", "cosine",
                           "--warmup-steps", 0, "--beta1", BETAS[0], "--beta2", BETAS[1], "--adam-eps", EPS,
                           "--weight-decay", WEIGHT_DECAY, "--grad-clip", GRAD_CLIP, "--save-hf", out)
    engine_steps = {r["step"]: r for r in records if "loss" in r and "grad_norm" in r and "event" not in r}
    engine_final_val = [r for r in records if "val_loss" in r and "event" not in r][-1]["val_loss"]
    ours = torch_train(model, batches, steps)
    worst = {"loss": 0.0, "grad_norm": 0.0, "lr": 0.0}
    for step, (loss, norm, lr) in enumerate(ours, start=1):
        r = engine_steps[step]
        for key, theirs in (("loss", loss), ("grad_norm", norm), ("lr", lr)):
            worst[key] = max(worst[key], h.rel(r[key], theirs))
    last = engine_steps[steps]
    print(f"      step {steps}: engine loss {last['loss']:.7f} norm {last['grad_norm']:.6f}, "
          f"torch loss {ours[-1][0]:.7f} norm {ours[-1][1]:.6f}")
    h.check(worst["loss"] <= h.FP32_RTOL and worst["grad_norm"] <= h.FP32_RTOL and worst["lr"] <= 1e-12,
            f"{name}: {steps} AdamW steps, engine against torch: largest relative difference of the step's loss "
            f"{worst['loss']:.1e}, gradient norm {worst['grad_norm']:.1e}, lr {worst['lr']:.1e}")

    trained, problems = load_folder(h, out)
    h.check(not problems, f"{name}: --save-hf folder loads with nothing missing, unexpected or mismatched "
                          f"{problems or ''}")
    h.check(type(trained).__name__ == type(model).__name__ and is_tied(trained) == config["tie_word_embeddings"],
            f"{name}: --save-hf folder is a {type(trained).__name__}, head "
            f"{'tied' if is_tied(trained) else 'untied'}")
    mine = dict(model.named_parameters())
    diffs = {n: (p.detach() - mine[n].detach()).abs().flatten() for n, p in trained.named_parameters()}
    worst_tensor = max(diffs, key=lambda n: diffs[n].max().item())
    diff = diffs[worst_tensor].max().item()
    q999 = torch.quantile(torch.cat(list(diffs.values())).double(), 0.999).item()
    h.check(diff <= WEIGHT_ATOL and q999 <= WEIGHT_ATOL_999,
            f"{name}: weights after {steps} steps, engine (--save-hf) against torch: 99.9% within {q999:.1e} "
            f"(<= {WEIGHT_ATOL_999:g}), all within {diff:.1e} (<= {WEIGHT_ATOL:g}, in {worst_tensor})")
    h.compare(f"{name}: --save-hf folder's validation loss, engine's last against transformers'", engine_final_val,
              h.hf_loss(trained, *val), h.FP32_RTOL)
    results[f"{name}_train"] = {"steps": steps, "max_rel_loss": worst["loss"], "max_rel_grad_norm": worst["grad_norm"],
                                "max_abs_weight_diff": diff, "weight_diff_q999": q999, "engine_final_loss": last["loss"],
                                "torch_final_loss": ours[-1][0], "engine_final_val": engine_final_val}
    return results


def check_llama(h, args, train_bin, val_bin):
    results = {}
    for name, (kind, config) in MODELS.items():
        results.update(check_model(h, args, name, kind, config, train_bin, val_bin))
    return results
