#!/usr/bin/env python3
"""The engine's Hugging Face files (GPT-2, Llama, Qwen2) checked against transformers itself.

    examples/hf/check_transformers.py --train build/launch/train
    examples/hf/check_transformers.py --train build/launch/train --checks llama
    examples/hf/check_transformers.py --train build/launch/train --folder runs/mine/hf --val-data data/val.bin

Without --folder, both directions on a tiny model (gpt-micro, vocabulary 200,
padded to 256 by the engine), on the CPU:

  export   `train --save-hf` (fp32 and bf16) after a few steps, loaded by
           GPT2LMHeadModel.from_pretrained with no missing, unexpected or
           mismatched tensor; head tied to wte, vocabulary unpadded, greedy
           generation runs. transformers' loss on the validation sequences the
           engine scored equals the engine's validation loss of its last step.
  import   a randomly initialised GPT2LMHeadModel (every tensor perturbed, so
           a transposed, swapped or zeroed tensor shows) written by
           save_pretrained: whole, sharded (max_shard_size), and as older
           checkpoints are (no "transformer." prefix, attn.bias and
           attn.masked_bias buffers). `train --init-from` each: its step-1
           training loss (before any update) and its --eval-only loss equal
           transformers' losses on the same sequences.

  tokenizer  a BPE learned by `prepare --train-tokenizer`, then `train
           --tokenizer --save-hf`: AutoTokenizer loads the folder, encodes
           "hello world" as the engine's `prepare --tokenizer` did, has
           <|endoftext|> as bos and eos; generate() runs with the exported
           generation_config.json, and so does pipeline("text-generation").

  llama    random small LlamaForCausalLM and Qwen2ForCausalLM models (GQA and
           MQA, tied and untied heads, Qwen2's q/k/v bias, Llama 3 rope
           scaling) written by save_pretrained (whole and sharded): `train
           --init-from` each without --model gives transformers' losses; N
           AdamW steps track torch.optim.AdamW step by step (loss, gradient
           norm, learning rate, final weights); the engine's --save-hf folder
           loads back into the same class (examples/hf/llama_checks.py).

--checks gpt2 or --checks llama runs one part only. With --folder, one folder
written by `train --save-hf` (any of the three architectures): transformers'
loss on --val-data against the engine's --eval-only loss of the same folder.

The engine prints losses, not logits, so losses are what is compared: the mean
cross-entropy over N sequences of T tokens, sequence k being tokens
[kT, kT + T] of the shard (launch/data/data_loader.cpp), computed here from
transformers' fp32 logits in float64. Tolerances: relative 1e-5 wherever both
sides compute in fp32 from the same weights (only the summation order
differs); a bf16 file against the fp32 model it was rounded from, 2e-3 (each
weight moves by up to 2^-9 = 2e-3 relative, and the errors mostly cancel in a
mean loss); transformers computing in bf16, 1e-2 (bf16 activations and matmul
outputs keep 8 bits of mantissa, rounded again at every layer).

Exits 0 when every check passes, 1 when one fails, 77 (CTest's skip code, see
tests/launch/formats/CMakeLists.txt) when torch, transformers or numpy do not import.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # the test machines have no torch: a skip, not a failure
    print(f"SKIP: {e} (in {sys.executable}); install torch and transformers to run this check")
    sys.exit(SKIP)
if not transformers.utils.is_torch_available():  # e.g. transformers 5 beside Debian 12's torch 1.13
    print(f"SKIP: transformers {transformers.__version__} does not work with torch {torch.__version__} "
          f"(in {sys.executable})")
    sys.exit(SKIP)

VOCAB = 200   # the engine pads it to 256
T = 64        # gpt-micro's max_seq_len: every position row is used
B = 4         # micro-batch
MICRO = dict(n_layer=2, n_head=2, n_embd=32, n_positions=T)  # model/gpt_config.cpp's gpt-micro
FP32_RTOL, BF16_FILE_RTOL, BF16_COMPUTE_RTOL = 1e-5, 2e-3, 1e-2

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def rel(a, b):
    return abs(a - b) / abs(b)


def compare(what, engine, theirs, rtol, names=("engine", "transformers")):
    check(rel(engine, theirs) <= rtol, f"{what}: {names[0]} {engine:.7f}, {names[1]} {theirs:.7f}, "
                                       f"relative {rel(engine, theirs):.1e} (<= {rtol:g})")


def write_shard(path, tokens):
    """llm.c's token shard: 256 int32 header (magic, version, count), uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def read_shard(path):
    raw = np.fromfile(path, dtype="<u2")
    header = raw[:512].view("<i4")
    assert header[0] == 20240520, f"{path} is not a token shard"
    return raw[512:512 + int(header[2])].astype(np.int64)


def sequences(tokens, first, count):
    """Sequences first .. first + count - 1 as the engine's loader cuts them:
    (inputs, targets), each (count, T)."""
    rows = [tokens[k * T:k * T + T + 1] for k in range(first, first + count)]
    assert all(len(r) == T + 1 for r in rows), "shard too short"
    x = torch.tensor(np.stack(rows))
    return x[:, :-1], x[:, 1:]


def hf_loss(model, inputs, targets):
    """Mean cross-entropy of every (input, target) pair, in float64 from the
    model's logits (whatever dtype it computes in)."""
    with torch.no_grad():
        logits = model(inputs).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()


def load(folder, dtype):
    # transformers 5 calls it dtype; 4.x torch_dtype.
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model, info = GPT2LMHeadModel.from_pretrained(folder, output_loading_info=True, **{key: dtype})
    return model.eval(), info


def run_engine(args, *flags):
    """`train` on the CPU, one thread (deterministic); returns its JSONL records."""
    log = os.path.join(args.work, "metrics.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [args.train, "--device", "cpu", "--peak-tflops", "1", "--log-file", log, *map(str, flags)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if out.returncode != 0:
        sys.exit(f"FAIL  {' '.join(cmd)} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    print("      $ " + " ".join(cmd), flush=True)
    return [json.loads(line) for line in open(log)]


def engine_shape_flags(config):
    """The `train` flags that make the model of a GPT-2 config.json."""
    return ["--n-layer", config["n_layer"], "--n-head", config["n_head"], "--n-embd", config["n_embd"],
            "--vocab-size", config["vocab_size"], "--max-seq-len", config["n_positions"]]


def engine_eval(args, model_flags, init_from, val_data, val_tokens):
    records = run_engine(args, *model_flags, "--seq-len", T, "--micro-batch", B, "--eval-only",
                         "--init-from", init_from, "--val-data", val_data, "--val-tokens", val_tokens)
    return next(r["val_loss"] for r in records if r.get("event") == "eval")


def check_export(args, train_bin, val_bin, val_tokens):
    print("== export: train --save-hf, loaded by GPT2LMHeadModel.from_pretrained", flush=True)
    tokens = read_shard(val_bin)
    inputs, targets = sequences(tokens, 0, min(val_tokens // T, (len(tokens) - 1) // T))
    folders, engine_val = {}, None
    for dtype in ("fp32", "bf16"):
        folders[dtype] = os.path.join(args.work, f"hf_{dtype}")
        # Same seed, same data, one thread: both runs end with the same weights.
        records = run_engine(args, "--model", "gpt-micro", "--vocab-size", VOCAB, "--micro-batch", B, "--seq-len", T,
                             "--steps", args.steps, "--lr", 3e-3, "--seed", 5, "--train-data", train_bin, "--val-data", val_bin,
                             "--val-tokens", val_tokens, "--save-hf", folders[dtype], "--save-hf-dtype", dtype)
        last = [r for r in records if "val_loss" in r and "event" not in r][-1]
        assert last["step"] == args.steps, last
        if engine_val is None:
            engine_val = last["val_loss"]
            print(f"      engine: training loss {next(r['loss'] for r in records if r.get('step') == 1 and 'loss' in r):.4f} at step 1, {last['loss']:.4f} at step "
                  f"{args.steps}; validation loss {engine_val:.7f}")
        else:
            check(last["val_loss"] == engine_val, f"{dtype} run: the same final validation loss as the fp32 run")

    model, info = load(folders["fp32"], torch.float32)
    problems = {k: v for k, v in info.items() if v}
    check(not problems, f"fp32 folder loads with nothing missing, unexpected or mismatched {problems or ''}")
    check(model.config.vocab_size == VOCAB and model.transformer.wte.weight.shape[0] == VOCAB,
          f"vocabulary unpadded: config {model.config.vocab_size}, wte rows {model.transformer.wte.weight.shape[0]}")
    check(model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "lm_head is tied to wte")
    theirs = hf_loss(model, inputs, targets)
    compare(f"fp32 folder, validation loss after step {args.steps} over {inputs.numel()} tokens",
            engine_val, theirs, FP32_RTOL)
    results = {"engine_val_loss": engine_val, "hf_fp32_val_loss": theirs}

    with torch.no_grad():
        out = model.generate(inputs[:1, :8], max_new_tokens=16, do_sample=False, pad_token_id=0)
    check(out.shape == (1, 24) and int(out.max()) < VOCAB, f"greedy generation runs: {out[0, 8:].tolist()}")

    bf16_model, info = load(folders["bf16"], torch.float32)  # the rounded weights, computed in fp32
    problems = {k: v for k, v in info.items() if v}
    check(not problems, f"bf16 folder loads with nothing missing, unexpected or mismatched {problems or ''}")
    bf16_file_loss = hf_loss(bf16_model, inputs, targets)
    # The same rounded weights read back by the engine: fp32 against fp32 again.
    engine_bf16 = engine_eval(args, ["--model", "gpt-micro", "--vocab-size", VOCAB], folders["bf16"], val_bin, val_tokens)
    compare("bf16 folder read by the engine (--eval-only) and by transformers, both computing in fp32",
            engine_bf16, bf16_file_loss, FP32_RTOL)
    compare("bf16 folder against the engine's fp32 validation loss (weights rounded to bf16)",
            engine_val, bf16_file_loss, BF16_FILE_RTOL)
    native, _ = load(folders["bf16"], torch.bfloat16)
    check(native.transformer.wte.weight.dtype == torch.bfloat16, "bf16 folder loads as bfloat16")
    bf16_compute_loss = hf_loss(native, inputs, targets)
    compare("bf16 folder computed in bf16 by transformers against the engine's fp32 loss",
            engine_val, bf16_compute_loss, BF16_COMPUTE_RTOL)
    with torch.no_grad():
        diff = (model(inputs).logits - bf16_model(inputs).logits).abs().max().item()
    print(f"      max |logit| difference, fp32 folder vs bf16 folder (both computed in fp32): {diff:.3e}")
    results.update(engine_bf16_eval_loss=engine_bf16, hf_bf16_file_fp32_compute=bf16_file_loss,
                   hf_bf16_compute=bf16_compute_loss, max_logit_diff_fp32_vs_bf16_file=diff)
    return results


def random_gpt2(tied=True, eps=1e-5):
    """A GPT2LMHeadModel of gpt-micro's shape with every tensor random: the
    default init's zero biases and unit LayerNorm gains would hide a swap.
    tied=False gives it its own lm_head.weight; eps is layer_norm_epsilon."""
    torch.manual_seed(0 if tied else 1)
    config = GPT2Config(vocab_size=VOCAB, activation_function="gelu_new", layer_norm_epsilon=eps, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
                        tie_word_embeddings=tied, **MICRO)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def legacy_folder(src, dst):
    """src's weights as older GPT-2 checkpoints (OpenAI's gpt2 on the Hub) hold
    them: no "transformer." prefix, and each layer's causal-mask buffers."""
    os.makedirs(dst, exist_ok=True)
    tensors = {}
    for name, value in load_file(os.path.join(src, "model.safetensors")).items():
        tensors[name.removeprefix("transformer.")] = value
    for layer in range(MICRO["n_layer"]):
        tensors[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
        tensors[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f, open(os.path.join(dst, "config.json"), "w") as g:
        g.write(f.read())
    return sorted(tensors)


def check_import(args, train_bin, val_bin, val_tokens):
    print("== import: save_pretrained, then train --init-from", flush=True)
    model = random_gpt2()
    whole = os.path.join(args.work, "pretrained")
    model.save_pretrained(whole)  # safetensors is the default
    check(os.path.exists(os.path.join(whole, "model.safetensors")), "save_pretrained wrote model.safetensors")
    sharded = os.path.join(args.work, "pretrained_sharded")
    model.save_pretrained(sharded, max_shard_size="40KB")
    index = os.path.join(sharded, "model.safetensors.index.json")
    shards = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else []
    check(len(shards) >= 2, f"save_pretrained(max_shard_size='40KB') wrote an index and {len(shards)} shards")
    legacy = os.path.join(args.work, "pretrained_legacy")
    names = legacy_folder(whole, legacy)
    check("h.0.attn.bias" in names and "wte.weight" in names, "legacy folder: no prefix, attn.bias buffers")
    legacy_model, _ = load(legacy, torch.float32)

    train_tokens, val_tokens_all = read_shard(train_bin), read_shard(val_bin)
    batch0 = sequences(train_tokens, 0, B)  # step 1's batch without shuffling
    val = sequences(val_tokens_all, 0, min(val_tokens // T, (len(val_tokens_all) - 1) // T))
    theirs_train, theirs_val = hf_loss(model, *batch0), hf_loss(model, *val)
    compare("legacy folder read by transformers itself (validation loss)", hf_loss(legacy_model, *val), theirs_val,
            FP32_RTOL, names=("legacy", "whole"))
    config = json.load(open(os.path.join(whole, "config.json")))
    flags = engine_shape_flags(config)
    results = {"hf_step1_loss": theirs_train, "hf_val_loss": theirs_val}
    for label, path in (("whole", whole), ("sharded", sharded), ("legacy", legacy)):
        records = run_engine(args, *flags, "--micro-batch", B, "--seq-len", T, "--steps", 1, "--shuffle", "false",
                             "--train-data", train_bin, "--init-from", path)
        step1 = next(r for r in records if r.get("step") == 1 and "loss" in r)["loss"]
        compare(f"--init-from {label}: step-1 training loss (batch 0, before the update)", step1, theirs_train, FP32_RTOL)
        engine_val = engine_eval(args, flags, path, val_bin, val_tokens)
        compare(f"--init-from {label}: --eval-only validation loss", engine_val, theirs_val, FP32_RTOL)
        results[f"engine_{label}_step1_loss"], results[f"engine_{label}_val_loss"] = step1, engine_val
    return results


def check_untied(args, train_bin, val_bin, val_tokens):
    """A GPT-2 with its own output head and another layer_norm_epsilon (issue
    38: both were once dropped or refused): loaded by --init-from, scored the
    same as transformers, trained, and written back by --save-hf as such."""
    print("== untied head, layer_norm_epsilon 1e-3: save_pretrained, --init-from, --save-hf", flush=True)
    # eps 1e-3 against LayerNorm inputs of variance ~1e-2 (0.1 x randn weights):
    # a model computed with GPT-2's 1e-5 instead scores visibly differently.
    model = random_gpt2(tied=False, eps=1e-3)
    check(model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr(), "the model's head is untied")
    folder = os.path.join(args.work, "untied")
    model.save_pretrained(folder)
    train_tokens, val_tokens_all = read_shard(train_bin), read_shard(val_bin)
    val = sequences(val_tokens_all, 0, min(val_tokens // T, (len(val_tokens_all) - 1) // T))
    theirs_train, theirs_val = hf_loss(model, *sequences(train_tokens, 0, B)), hf_loss(model, *val)
    records = run_engine(args, "--micro-batch", B, "--seq-len", T, "--steps", 1, "--shuffle", "false",
                         "--train-data", train_bin, "--init-from", folder)
    step1 = next(r for r in records if r.get("step") == 1 and "loss" in r)["loss"]
    compare("--init-from untied: step-1 training loss", step1, theirs_train, FP32_RTOL)
    engine_val = engine_eval(args, [], folder, val_bin, val_tokens)
    compare("--init-from untied: --eval-only validation loss", engine_val, theirs_val, FP32_RTOL)
    saved = os.path.join(args.work, "untied_saved")
    run_engine(args, "--micro-batch", B, "--seq-len", T, "--steps", 3, "--train-data", train_bin,
               "--init-from", folder, "--save-hf", saved, "--save-hf-dtype", "fp32")
    config = json.load(open(os.path.join(saved, "config.json")))
    check(config["tie_word_embeddings"] is False and config["layer_norm_epsilon"] == 1e-3,
          "--save-hf wrote tie_word_embeddings false and layer_norm_epsilon 1e-3")
    folder_results = check_folder(argparse.Namespace(**{**vars(args), "folder": saved, "val_data": val_bin,
                                                       "val_tokens": val_tokens}))
    return {"hf_untied_step1_loss": theirs_train, "engine_untied_step1_loss": step1,
            "hf_untied_val_loss": theirs_val, "engine_untied_val_loss": engine_val,
            "engine_untied_saved_val_loss": folder_results["engine_val_loss"],
            "hf_untied_saved_val_loss": folder_results["hf_val_loss"]}


def run_prepare(args, *flags):
    cmd = [args.prepare, *map(str, flags)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL  {' '.join(cmd)} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    print("      $ " + " ".join(cmd), flush=True)


def check_tokenizer(args):
    """A tokenizer learned by `prepare --train-tokenizer`, trained on, and
    exported by `train --tokenizer --save-hf`: AutoTokenizer encodes as the
    engine does, bos/eos are <|endoftext|>, generate() and pipeline() run."""
    print("== tokenizer: prepare --train-tokenizer, train --tokenizer --save-hf, AutoTokenizer and pipeline",
          flush=True)
    import glob
    text_dir, hello_dir = os.path.join(args.work, "text"), os.path.join(args.work, "hello")
    os.makedirs(text_dir, exist_ok=True)
    os.makedirs(hello_dir, exist_ok=True)
    words = "hello world the quick brown fox jumps over a lazy dog while engines train small models".split()
    rng = np.random.default_rng(1)
    with open(os.path.join(text_dir, "corpus.txt"), "w") as f:
        for _ in range(400):
            f.write(" ".join(rng.choice(words, 10)) + ".\n")
    with open(os.path.join(hello_dir, "hello.txt"), "w") as f:
        f.write("hello world")
    shards, tokenizer = os.path.join(args.work, "tok_shards"), os.path.join(args.work, "tok_shards", "t_tokenizer.json")
    run_prepare(args, "--input", text_dir, "--output-dir", shards, "--name", "t", "--train-tokenizer", 300)
    # The engine's own encoding of "hello world": a shard of that text alone
    # (<|endoftext|> first, as prepare starts every document with it).
    run_prepare(args, "--input", hello_dir, "--output-dir", os.path.join(args.work, "hello_shards"), "--name", "h",
                "--tokenizer", tokenizer, "--val-fraction", 0)
    hello = read_shard(glob.glob(os.path.join(args.work, "hello_shards", "h_train_*.bin"))[0]).tolist()
    eot = json.load(open(tokenizer))["added_tokens"][0]
    check(eot["content"] == "<|endoftext|>" and hello[0] == eot["id"],
          f"the engine's shard of 'hello world' starts with <|endoftext|> (id {eot['id']}): {hello}")
    engine_ids = hello[1:]

    folder = os.path.join(args.work, "hf_tok")
    run_engine(args, "--model", "gpt-micro", "--tokenizer", tokenizer, "--micro-batch", B, "--seq-len", T, "--steps", 5,
               "--train-data", os.path.join(shards, "t_train_*.bin"), "--save-hf", folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        check(os.path.exists(os.path.join(folder, name)), f"--save-hf wrote {name}")
    check(open(os.path.join(folder, "tokenizer.json"), "rb").read() == open(tokenizer, "rb").read(),
          "tokenizer.json is the run's, byte for byte")

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tok.encode("hello world")
    check(len(ids) > 0 and ids == engine_ids, f"AutoTokenizer encodes 'hello world' as the engine does: "
                                              f"{ids} (engine {engine_ids})")
    check(tok.bos_token == "<|endoftext|>" and tok.eos_token == "<|endoftext|>" and tok.eos_token_id == eot["id"],
          f"bos/eos are <|endoftext|>: {tok.bos_token!r} {tok.eos_token!r} id {tok.eos_token_id}")
    model, _ = load(folder, torch.float32)
    check(model.generation_config.eos_token_id == eot["id"] and model.generation_config.bos_token_id == eot["id"],
          f"generation_config.json read: bos {model.generation_config.bos_token_id}, "
          f"eos {model.generation_config.eos_token_id}")
    with torch.no_grad():
        inputs = tok("hello world", return_tensors="pt")
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=eot["id"])
    check(out.shape[0] == 1 and out.shape[1] > len(ids) and out[0, :len(ids)].tolist() == ids,
          f"generate() with the exported generation_config: {tok.decode(out[0])!r}")
    pipe = transformers.pipeline("text-generation", model=folder, device="cpu")
    text = pipe("hello world", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    check(isinstance(text, str) and text.startswith("hello world"), f"pipeline('text-generation') runs: {text!r}")
    return {"hello_world_ids": ids}


def check_folder(args):
    """One --save-hf folder: transformers' loss on --val-data against the
    engine's --eval-only loss of the same folder."""
    config = json.load(open(os.path.join(args.folder, "config.json")))
    gpt2 = config.get("model_type", "gpt2") == "gpt2"
    if gpt2:
        model, info = load(args.folder, torch.float32)
    else:
        import llama_checks
        model, info = llama_checks.load_folder(sys.modules[__name__], args.folder)
    problems = {k: v for k, v in info.items() if v}
    check(not problems, f"{args.folder} loads with nothing missing, unexpected or mismatched {problems or ''}")
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    check(tied == config.get("tie_word_embeddings", gpt2),
          f"the output head is {'tied' if tied else 'untied'}, as config.json says")
    tokens = read_shard(args.val_data)
    inputs, targets = sequences(tokens, 0, min(args.val_tokens // T, (len(tokens) - 1) // T))
    theirs = hf_loss(model, inputs, targets)
    # A Llama-family folder's config.json gives the engine its model (no --model).
    engine = engine_eval(args, engine_shape_flags(config) if gpt2 else [], args.folder, args.val_data,
                         args.val_tokens)
    compare(f"{args.folder}: validation loss over {inputs.numel()} tokens", engine, theirs, FP32_RTOL)
    return {"engine_val_loss": engine, "hf_val_loss": theirs}


def main():
    global T
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True, help="the engine's train binary (build/launch/train)")
    parser.add_argument("--prepare", help="the engine's prepare binary (default: beside --train)")
    parser.add_argument("--folder", help="check this --save-hf folder only (with --val-data)")
    parser.add_argument("--val-data", help="token shard to score --folder on")
    parser.add_argument("--val-tokens", type=int, default=16 * 64, help="tokens scored (default 1024)")
    parser.add_argument("--seq-len", type=int, default=T, help="sequence length (default 64)")
    parser.add_argument("--steps", type=int, default=30, help="engine steps before --save-hf (default 30)")
    parser.add_argument("--checks", choices=("all", "gpt2", "llama"), default="all",
                        help="which part to run without --folder (default all)")
    parser.add_argument("--llama-steps", type=int, default=10,
                        help="AdamW steps the Llama-family models train in the engine and in torch (default 10)")
    parser.add_argument("--work", help="working folder (default: a temporary one, deleted)")
    parser.add_argument("--json", help="also write the compared numbers here")
    args = parser.parse_args()
    T = args.seq_len
    args.prepare = args.prepare or os.path.join(os.path.dirname(os.path.abspath(args.train)), "prepare")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}", flush=True)
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        args.work = args.work or tmp
        os.makedirs(args.work, exist_ok=True)
        if args.folder:
            if not args.val_data:
                parser.error("--folder needs --val-data")
            results = check_folder(args)
        else:
            rng = np.random.default_rng(0)
            train_bin, val_bin = os.path.join(args.work, "train.bin"), os.path.join(args.work, "val.bin")
            # Tokens with some structure (a noisy walk), so a few steps of training move the loss.
            write_shard(train_bin, np.cumsum(rng.integers(-2, 3, 20000)) % VOCAB)
            write_shard(val_bin, np.cumsum(rng.integers(-2, 3, 4000)) % VOCAB)
            results = {}
            if args.checks in ("all", "gpt2"):
                results.update(**check_export(args, train_bin, val_bin, args.val_tokens),
                               **check_import(args, train_bin, val_bin, args.val_tokens),
                               **check_untied(args, train_bin, val_bin, args.val_tokens),
                               **check_tokenizer(args))
            if args.checks in ("all", "llama"):
                # Llama 3's rope scaling ("rope_type": "llama3") came with transformers 4.43.
                if tuple(int(v) for v in transformers.__version__.split(".")[:2]) < (4, 43):
                    check(False, f"transformers {transformers.__version__} predates Llama 3 rope scaling (4.43)")
                else:
                    import llama_checks
                    results.update(llama_checks.check_llama(sys.modules[__name__], args, train_bin, val_bin))
    results.update(torch=torch.__version__, transformers=transformers.__version__)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
