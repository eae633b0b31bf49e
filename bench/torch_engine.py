"""transformers' side of `ember bench --random-weights`: the same config.json built with random
bf16 weights on the GPU, a random prompt of --prompt-len tokens, then --gen-len greedy tokens,
for each experts implementation transformers offers (default, grouped_mm, batched_mm). Decode
tokens/s is gen-len / (generate time - prefill time), prefill tokens/s from a forward pass over
the prompt, both after a short warm-up generate.

Given ember's JSON results (--ember FILE, one object per line from `ember bench --json`), it
prints the ratio table against the best transformers implementation as well.

Usage: torch_engine.py --config CONFIG_JSON [--prompt-len 512] [--gen-len 64] [--ember FILE]"""
import argparse
import json
import time

import torch
import transformers


def build(config_path):
    fields = json.load(open(config_path))
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    torch.set_default_dtype(torch.float32)
    return config, model.eval()


def measure(model, vocab, prompt_len, gen_len):
    prompt = torch.randint(0, vocab, (1, prompt_len), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    with torch.no_grad():
        model.generate(prompt[:, :16], max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up
        torch.cuda.synchronize()
        t = time.perf_counter()
        model(prompt)
        torch.cuda.synchronize()
        prefill_s = time.perf_counter() - t
        t = time.perf_counter()
        model.generate(prompt, max_new_tokens=gen_len, min_new_tokens=gen_len, do_sample=False)
        torch.cuda.synchronize()
        total_s = time.perf_counter() - t
    # generate's first step is the prefill; the remaining gen_len - 1 steps are decode steps.
    return {"prefill_tokens_per_second": prompt_len / prefill_s,
            "decode_tokens_per_second": (gen_len - 1) / max(total_s - prefill_s, 1e-9)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen-len", type=int, default=64)
    p.add_argument("--ember", help="ember bench --json results, one object per line")
    args = p.parse_args()

    config, model = build(args.config)
    results = []
    for impl in [None, "grouped_mm", "batched_mm"]:
        name = impl or "default"
        try:
            if impl:
                model.set_experts_implementation(impl)
            r = measure(model, config.vocab_size, args.prompt_len, args.gen_len)
        except Exception as e:  # an implementation this transformers version lacks
            r = {"error": repr(e)[:300]}
        r.update(impl="transformers", experts_implementation=name, transformers=transformers.__version__,
                 torch=torch.__version__, dtype="bf16", prompt_tokens=args.prompt_len, decode_steps=args.gen_len - 1)
        print(json.dumps(r), flush=True)
        results.append(r)

    if args.ember:
        ok = [r for r in results if "decode_tokens_per_second" in r]
        best_decode = max(ok, key=lambda r: r["decode_tokens_per_second"])
        best_prefill = max(ok, key=lambda r: r["prefill_tokens_per_second"])
        print(f"transformers best: decode {best_decode['decode_tokens_per_second']:.1f} tok/s "
              f"({best_decode['experts_implementation']}), prefill {best_prefill['prefill_tokens_per_second']:.0f} tok/s "
              f"({best_prefill['experts_implementation']})")
        for line in open(args.ember):
            if not line.startswith("{"):
                continue
            e = json.loads(line)
            print(f"ember {e['dtype']:5} decode {e['decode_tokens_per_second']:7.1f} tok/s "
                  f"({e['decode_tokens_per_second'] / best_decode['decode_tokens_per_second']:.1f}x)  "
                  f"prefill {e['prefill_tokens_per_second']:8.0f} tok/s "
                  f"({e['prefill_tokens_per_second'] / best_prefill['prefill_tokens_per_second']:.1f}x)  "
                  f"peak {e.get('peak_allocated_bytes', 0) / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
