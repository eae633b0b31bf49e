#!/usr/bin/env python3
"""Reference values for the bundled model (models/kjv-moe), computed with transformers in float32.

  python3 scripts/bundled_model_fixtures.py --corpus /work/kjv-corpus/kjv.txt [--model models/kjv-moe]

writes into the model directory (or --out-dir):
  heldout.txt                the excerpt: whole lines from the start of the held-out split
                             (split_corpus in train_bundled_model.py), at most 500 tokens
  expected_perplexity.json   its token ids (HF tokenizers), the perplexity transformers gives it
                             as one sequence (exp of the mean negative log-likelihood of tokens
                             1..n-1, no BOS added), and a greedy continuation of a prompt
Works with transformers 5.17 and 5.24.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bundled_model import REPO, read_corpus, split_corpus  # noqa: E402

MAX_TOKENS = 500
GREEDY_PROMPT = "In the beginning"
GREEDY_TOKENS = 32


def heldout_excerpt(tokenizer, heldout_text):
    """Whole lines from the start of `heldout_text` while their tokens stay within MAX_TOKENS."""
    excerpt = ""
    for line in heldout_text.split("\n"):
        candidate = excerpt + line + "\n"
        if len(tokenizer.encode(candidate).ids) > MAX_TOKENS:
            break
        excerpt = candidate
    return excerpt


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.join(REPO, "models", "kjv-moe"), help="saved model directory")
    parser.add_argument("--corpus", required=True, help="the corpus text (train_bundled_model.py --prepare-corpus)")
    parser.add_argument("--out-dir", help="where to write the fixtures (default: the model directory)")
    args = parser.parse_args()
    out_dir = args.out_dir or args.model

    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tokenizer = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    _, _, heldout_text = split_corpus(read_corpus(args.corpus))
    excerpt = heldout_excerpt(tokenizer, heldout_text)
    ids = tokenizer.encode(excerpt).ids

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
        nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="mean").item()

        prompt_ids = tokenizer.encode(GREEDY_PROMPT).ids
        eos_id = model.config.eos_token_id
        generated = model.generate(torch.tensor([prompt_ids]), max_new_tokens=GREEDY_TOKENS, do_sample=False,
                                   eos_token_id=eos_id, pad_token_id=eos_id)[0, len(prompt_ids):].tolist()

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "heldout.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(excerpt)
    expected = {
        "text": "heldout.txt",
        "tokens": ids,
        "mean_nll": nll,
        "perplexity": math.exp(nll),
        "greedy": {"prompt": GREEDY_PROMPT, "prompt_tokens": prompt_ids, "new_tokens": generated,
                   "text": tokenizer.decode(generated)},
        "dtype": "float32 (bfloat16 weights upcast)",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    with open(os.path.join(out_dir, "expected_perplexity.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"held-out excerpt: {len(excerpt)} characters, {len(ids)} tokens, perplexity {math.exp(nll):.3f}; "
          f"greedy after {GREEDY_PROMPT!r}: {tokenizer.decode(generated)!r}; wrote {out_dir}")


if __name__ == "__main__":
    main()
