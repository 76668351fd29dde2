#!/usr/bin/env python3
"""Writes the seed inputs of tests/fuzz/corpus/ that no file elsewhere in the
repository provides: small valid files of each binary format, Hugging Face
config.json files of each supported model type, and texts for the
tokenizers. Standard library only; run from anywhere:

    python3 tests/fuzz/make_seeds.py

The files are committed; rerun this only to change them (the fuzzing
campaigns add their own inputs beside them, named by content hash)."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> the file's bytes."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def shard(tokens, version):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, version, len(tokens)
    if version == 2:
        header[3] = 4
    body = struct.pack(f"<{len(tokens)}{'H' if version == 1 else 'I'}", *tokens)
    return struct.pack("<256i", *header) + body


def llmc_tokenizer(tokens, eot):
    header = [0] * 256
    header[0], header[1], header[2], header[3] = 20240328, 2, len(tokens), eot
    return struct.pack("<256I", *header) + b"".join(bytes([len(t)]) + t for t in tokens)


def main():
    put("fuzz_safetensors", "seed_three_dtypes.safetensors", safetensors(
        [("w", "F32", [2, 3], struct.pack("<6f", 1, -2, 3.5, 0, 1e-3, -7)),
         ("b", "BF16", [4], struct.pack("<4H", 0x3F80, 0xBF80, 0x4000, 0)),
         ("h", "F16", [2, 1], struct.pack("<2H", 0x3C00, 0xC000))], {"format": "pt"}))
    put("fuzz_safetensors", "seed_empty_tensor.safetensors", safetensors([("e", "F32", [0, 5], b"")]))

    put("fuzz_token_shard", "seed_v1.bin", shard([50256, 15496, 995, 0, 1, 2, 65535], 1))
    put("fuzz_token_shard", "seed_v2.bin", shard([128000, 9906, 1917, 151935, 0], 2))

    put("fuzz_llmc_tokenizer", "seed_v2.bin", llmc_tokenizer([b"a", b"b", b"ab", b" the", b"<|endoftext|>"], 4))

    configs = {
        "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 2,
                 "n_embd": 32, "n_positions": 64, "vocab_size": 96, "layer_norm_epsilon": 1e-5},
        "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 16,
                  "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
                  "intermediate_size": 8192, "vocab_size": 128256, "max_position_embeddings": 131072,
                  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
                  "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
                  "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
        "qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 24,
                  "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2,
                  "intermediate_size": 4864, "vocab_size": 151936, "max_position_embeddings": 32768,
                  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
                  "hidden_act": "silu", "use_sliding_window": False, "sliding_window": 32768},
        "smollm2": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30,
                    "hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
                    "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192,
                    "rms_norm_eps": 1e-5, "rope_theta": 100000, "tie_word_embeddings": True,
                    "hidden_act": "silu", "rope_scaling": None},
    }
    for name, config in configs.items():
        put("fuzz_hf_config", f"seed_{name}.json", json.dumps(config, indent=2))

    # train --config: configurations that pass the command line, so that resolve()'s checks run too
    # (examples/configs/demo.json, also a seed, lacks --train-data and stops there).
    train_configs = {
        "demo_with_data": {"model": "gpt-demo", "train-data": "shards/train_*.bin", "micro-batch": 2,
                           "seq-len": 128, "batch-tokens": 2048, "steps": 100, "device": "cpu"},
        "llama_layout": {"model": "llama-micro", "train-data": "train.bin", "tp": 2, "pp": 2, "zero": 1,
                         "recompute": "selective", "optimizer": "onebit-adam", "freeze-step": 10,
                         "precision": "fp8-emulated", "fp8-scaling": "block", "micro-batch": 2, "seq-len": 32},
        "interleaved": {"model": "gpt2-124m", "n-layer": 8, "train-data": "train.bin", "pp": 4, "seq-len": 64,
                        "micro-batch": 2, "batch-tokens": 2048, "pipeline-schedule": "interleaved",
                        "virtual-stages": 2, "layout": "manual",
                        "lr": 3e-4, "lr-schedule": "constant", "sequence-parallel": False},
    }
    for name, config in train_configs.items():
        put("fuzz_train_config", f"seed_{name}.json", json.dumps(config, indent=1))

    # The first byte picks the tokenizer (fuzz_tokenizer_encode.cpp: 0 GPT-2, 1 Llama 3, 2 Qwen2, 3 SmolLM2).
    texts = ["Hello world, it's 2024!\n\n  indented\tcode()",
             "café naïve Ångström 東京 한국어 🙂👍🏽",
             "<|endoftext|>text<|begin_of_text|> <|im_start|>user", "12345678901 3.14159 ... ---- \r\n"]
    for pick in range(4):
        for i, text in enumerate(texts):
            put("fuzz_tokenizer_encode", f"seed_{pick}_{i}.txt", bytes([pick]) + text.encode())


if __name__ == "__main__":
    main()
