#!/usr/bin/env python3
"""Trains ember's bundled model, models/kjv-moe: a small Qwen3-MoE on the King James Bible.

Three steps, each where it belongs:

  1. On Debian with the text installed (apt-get install -y bible-kjv bible-kjv-text):
       python3 scripts/train_bundled_model.py --prepare-corpus /work/kjv-corpus/kjv.txt
     writes the whole Bible as clean UTF-8 text: one chapter per block, its heading
     ("Genesis 1") on the first line, then one verse per line without its number, blocks
     separated by a blank line.
  2. Anywhere (seconds on a CPU):
       python3 scripts/train_bundled_model.py --train-tokenizer models/kjv-moe --corpus kjv.txt
     trains the byte-level BPE tokenizer on the training split and writes tokenizer.json and
     tokenizer_config.json.
  3. On the GPU (no network needed; PyTorch and transformers 5):
       python3 scripts/train_bundled_model.py --corpus kjv.txt --out DIR --minutes 4
     trains the model until the time budget (or the epoch cap) is spent and writes a
     transformers checkpoint in bfloat16 to DIR, with the tokenizer and a training log.
     --smoke runs a few steps of a tiny model on the CPU to check the whole path.

The corpus splits three ways, always the same (split_corpus): the trailing books that make up
2% of the text are the held-out set, on which the final perplexity is reported; every 100th
chapter of the rest is the validation set, which picks the checkpoint kept; the remainder
trains.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TOKENIZER_DIR = os.path.join(REPO, "models", "kjv-moe")

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
KJV_CHAPTERS, KJV_VERSES = 1189, 31102
HELDOUT_FRACTION = 0.02
VALID_EVERY_CHAPTER = 100


# ---------------------------------------------------------------------------------------------
# Corpus


def prepare_corpus(out_path):
    """Extracts every verse through bible-kjv's reader (the text package stores it compressed)."""
    if shutil.which("bible") is None:
        sys.exit("the `bible` reader is missing: apt-get install -y bible-kjv bible-kjv-text")
    # A line width far beyond the longest verse keeps every verse on one line.
    raw = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True,
                         capture_output=True).stdout.decode("ascii")
    chapters = []
    verse_line = re.compile(r"^\s+(\d+) (.+)$")
    for line in raw.split("\n"):
        if not line.strip():
            continue
        match = verse_line.match(line)
        if match:
            chapters[-1].append(match.group(2).strip())
        else:
            chapters.append([line.strip()])
    verses = sum(len(chapter) - 1 for chapter in chapters)
    if len(chapters) != KJV_CHAPTERS or verses != KJV_VERSES:
        sys.exit(f"unexpected reader output: {len(chapters)} chapters and {verses} verses, "
                 f"expected {KJV_CHAPTERS} and {KJV_VERSES}")
    text = "\n\n".join("\n".join(chapter) for chapter in chapters) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    train, valid, heldout = split_corpus(text)
    print(f"wrote {out_path}: {len(text.encode())} bytes, {len(chapters)} chapters, {verses} verses; "
          f"split train {len(train)} / valid {len(valid)} / held-out {len(heldout)} characters "
          f"(held-out from {heldout.split(chr(10), 1)[0]!r})")


def split_corpus(text):
    """(train, valid, heldout) texts, each in the corpus layout (chapter blocks)."""
    chapters = text.strip("\n").split("\n\n")
    book_of = [chapter.split("\n", 1)[0].rsplit(" ", 1)[0] for chapter in chapters]
    total = sum(len(chapter) for chapter in chapters)
    # Held out: whole trailing books, until they reach the fraction.
    first_heldout = len(chapters)
    heldout_chars = 0
    while heldout_chars < HELDOUT_FRACTION * total:
        book = book_of[first_heldout - 1]
        while first_heldout > 0 and book_of[first_heldout - 1] == book:
            first_heldout -= 1
            heldout_chars += len(chapters[first_heldout])
    rest = chapters[:first_heldout]
    valid = [c for i, c in enumerate(rest) if i % VALID_EVERY_CHAPTER == VALID_EVERY_CHAPTER // 2]
    train = [c for i, c in enumerate(rest) if i % VALID_EVERY_CHAPTER != VALID_EVERY_CHAPTER // 2]

    def join(blocks):
        return "\n\n".join(blocks) + "\n"
    return join(train), join(valid), join(chapters[first_heldout:])


def read_corpus(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# Tokenizer


def train_tokenizer(corpus_path, out_dir, vocab_size):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    train_text, _, _ = split_corpus(read_corpus(corpus_path))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Chapter blocks with their line breaks, so that merges across "\n" are learnt as they occur.
    tokenizer.train_from_iterator((block + "\n\n" for block in train_text.split("\n\n")), trainer)
    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    eos = SPECIAL_TOKENS[0]
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": eos,
        "eos_token": eos,
        "pad_token": eos,
        "unk_token": None,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    ids = tokenizer.encode(train_text).ids
    print(f"tokenizer: {tokenizer.get_vocab_size()} tokens, training split {len(train_text)} characters "
          f"-> {len(ids)} tokens ({len(train_text) / len(ids):.2f} characters per token); wrote {out_dir}")


def load_tokenizer(tokenizer_dir):
    from tokenizers import Tokenizer
    path = os.path.join(tokenizer_dir, "tokenizer.json")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: run --train-tokenizer first")
    return Tokenizer.from_file(path)


# ---------------------------------------------------------------------------------------------
# Model


def model_config(vocab_size, eos_id, smoke):
    from transformers import Qwen3MoeConfig
    if smoke:
        sizes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    else:
        sizes = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                     head_dim=32, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=192)
    return Qwen3MoeConfig(
        vocab_size=vocab_size,
        # Width of a dense MLP layer; every layer here is a mixture of experts, so it is unused.
        intermediate_size=sizes["moe_intermediate_size"] * sizes["num_experts_per_tok"],
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-6,
        norm_topk_prob=True,
        tie_word_embeddings=True,
        router_aux_loss_coef=0.01,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        **sizes,
    )


def add_dropout(model, p):
    """Dropout on the embedding output and on each attention and MoE output before its residual add.

    Hooks rather than config keys (Qwen3-MoE has none for these), so the saved model is the
    plain architecture; they act only in training mode.
    """
    import torch.nn.functional as F

    def on_tensor(module, _inputs, output):
        return F.dropout(output, p, module.training)

    def on_first(module, _inputs, output):
        return (F.dropout(output[0], p, module.training),) + tuple(output[1:])

    model.model.embed_tokens.register_forward_hook(on_tensor)
    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(on_first)
        layer.mlp.register_forward_hook(on_tensor)


def windows(tokens, seq_len):
    """Non-overlapping [n, seq_len] windows covering `tokens` (the tail shorter than seq_len dropped)."""
    n = tokens.numel() // seq_len
    return tokens[: n * seq_len].view(n, seq_len)


def mean_loss(model, batches, autocast):
    """Mean next-token loss in nats over every predicted position of `batches`."""
    import torch
    import torch.nn.functional as F
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            with autocast():
                logits = model(input_ids=batch).logits
            nll = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                  batch[:, 1:].reshape(-1), reduction="sum")
            total += nll.item()
            count += batch[:, 1:].numel()
    model.train(was_training)
    return total / count


# ---------------------------------------------------------------------------------------------
# Training


def train(args):
    import contextlib
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    start = time.time()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    tokenizer = load_tokenizer(args.tokenizer)
    eos_id = tokenizer.token_to_id(SPECIAL_TOKENS[0])
    train_text, valid_text, heldout_text = split_corpus(read_corpus(args.corpus))

    def encode(text):
        return torch.tensor(tokenizer.encode(text).ids, dtype=torch.long)
    train_tokens, valid_tokens, heldout_tokens = encode(train_text), encode(valid_text), encode(heldout_text)
    print(f"corpus {args.corpus}: train {train_tokens.numel()} / valid {valid_tokens.numel()} / "
          f"held-out {heldout_tokens.numel()} tokens; device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""), flush=True)

    if args.smoke:
        args.seq_len, args.batch_size, args.warmup_steps = 64, 4, 1
    seq_len, batch_size = args.seq_len, args.batch_size
    config = model_config(tokenizer.get_vocab_size(), eos_id, args.smoke)
    # The per-expert loop: on the GPU its speed is ample for this size, and it runs on every
    # torch and device, unlike grouped_mm with float32 master weights under autocast.
    model = AutoModelForCausalLM.from_config(config, experts_implementation="eager").to(device)
    model.train()
    add_dropout(model, args.dropout)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters ({2 * params / 1e6:.2f} MB in bfloat16), "
          f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"{config.num_experts} experts top-{config.num_experts_per_tok} of width {config.moe_intermediate_size}",
          flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                                  fused=device.type == "cuda")

    def autocast():
        if device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    valid_batches = [b.to(device) for b in windows(valid_tokens, seq_len).split(64)]
    heldout_batches = [b.to(device) for b in windows(heldout_tokens, seq_len).split(64)]
    if args.smoke:
        valid_batches, heldout_batches = valid_batches[:1], heldout_batches[:1]
    train_on_device = train_tokens.to(device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    budget_s = args.minutes * 60
    epoch_tokens = train_tokens.numel()
    max_steps = args.smoke_steps if args.smoke else None
    offsets = torch.arange(seq_len, device=device)

    log = {"valid": [], "train": []}
    best = {"loss": math.inf, "step": 0, "state": None}
    step, tokens_seen, interval_loss, interval_aux, interval_steps = 0, 0, 0.0, 0.0, 0
    train_start = time.time()
    interval_start = train_start
    while True:
        elapsed = time.time() - train_start
        progress = max(elapsed / budget_s, tokens_seen / (args.max_epochs * epoch_tokens))
        if progress >= 1 or (max_steps is not None and step >= max_steps):
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, epoch_tokens - seq_len, (batch_size, 1), device=device, generator=generator)
        batch = train_on_device[starts + offsets]
        with autocast():
            # labels are the inputs: the model shifts them to predict each next token.
            out = model(input_ids=batch, labels=batch, output_router_logits=True)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        tokens_seen += batch_size * seq_len
        interval_loss += out.loss.detach().float()
        interval_aux += out.aux_loss.detach().float()
        interval_steps += 1
        if step % args.log_every == 0 or (args.smoke and step == max_steps):
            loss = interval_loss.item() / interval_steps
            aux = interval_aux.item() / interval_steps
            lm_loss = loss - config.router_aux_loss_coef * aux
            now = time.time()
            rate = interval_steps * batch_size * seq_len / (now - interval_start)
            print(f"step {step:6d}  {now - train_start:6.1f}s  epoch {tokens_seen / epoch_tokens:6.2f}  "
                  f"lr {lr:.2e}  loss {lm_loss:.4f}  aux {aux:.3f}  {rate / 1e3:.0f}k tok/s", flush=True)
            log["train"].append({"step": step, "seconds": round(now - train_start, 1), "loss": round(lm_loss, 4)})
            interval_loss, interval_aux, interval_steps, interval_start = 0.0, 0.0, 0, now
        if step % args.eval_every == 0 or (args.smoke and step == max_steps):
            check_valid(model, valid_batches, autocast, step, tokens_seen / epoch_tokens, log, best)
    if not log["valid"] or log["valid"][-1]["step"] != step:
        check_valid(model, valid_batches, autocast, step, tokens_seen / epoch_tokens, log, best)
    train_seconds = time.time() - train_start
    print(f"trained {step} steps, {tokens_seen} tokens ({tokens_seen / epoch_tokens:.1f} epochs) in "
          f"{train_seconds:.0f}s; keeping step {best['step']} (validation loss {best['loss']:.4f})", flush=True)

    model.load_state_dict(best["state"])
    model.to(torch.bfloat16).eval()
    # The saved weights are bfloat16; held-out loss is computed from them in float32.
    model.float()
    heldout_loss = mean_loss(model, heldout_batches, contextlib.nullcontext)
    model.to(torch.bfloat16)
    print(f"held-out ({heldout_text.split(chr(10), 1)[0]} to the end, {sum(b.numel() for b in heldout_batches)} "
          f"tokens in windows of {seq_len}): loss {heldout_loss:.4f} nats/token, perplexity {math.exp(heldout_loss):.2f}",
          flush=True)

    save(model, tokenizer, args, config, eos_id)
    samples = print_samples(model, tokenizer, device, eos_id, 24 if args.smoke else 60)
    log.update({
        "corpus": os.path.basename(args.corpus),
        "train_tokens": int(train_tokens.numel()),
        "valid_tokens": int(valid_tokens.numel()),
        "heldout_first_chapter": heldout_text.split("\n", 1)[0],
        "heldout_tokens_scored": int(sum(b[:, 1:].numel() for b in heldout_batches)),
        "heldout_loss": round(heldout_loss, 4),
        "heldout_perplexity": round(math.exp(heldout_loss), 3),
        "kept_step": best["step"],
        "steps": step,
        "epochs": round(tokens_seen / epoch_tokens, 2),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.time() - start, 1),
        "parameters": params,
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "corpus", "tokenizer", "prepare_corpus", "train_tokenizer")},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "samples": samples,
    })
    with open(os.path.join(args.out, "training_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"wrote {args.out} (model.safetensors {size / 1e6:.2f} MB) in {time.time() - start:.0f}s total", flush=True)


def check_valid(model, valid_batches, autocast, step, epochs, log, best):
    loss = mean_loss(model, valid_batches, autocast)
    log["valid"].append({"step": step, "epochs": round(epochs, 2), "loss": round(loss, 4)})
    marker = ""
    if loss < best["loss"]:
        best.update(loss=loss, step=step,
                    state={k: v.detach().clone() for k, v in model.state_dict().items()})
        marker = "  (best)"
    print(f"  validation loss {loss:.4f} at step {step}{marker}", flush=True)


def save(model, tokenizer, args, config, eos_id):
    from transformers import GenerationConfig
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    GenerationConfig(do_sample=True, temperature=0.8, top_k=40, top_p=0.95, bos_token_id=eos_id,
                     eos_token_id=eos_id, pad_token_id=eos_id).save_pretrained(args.out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer, name), os.path.join(args.out, name))


def print_samples(model, tokenizer, device, eos_id, new_tokens):
    import torch
    samples = []
    prompts = ["In the beginning", "And Jesus said", "The LORD is my shepherd", "Blessed are"]
    torch.manual_seed(0)
    for prompt in prompts:
        ids = torch.tensor([tokenizer.encode(prompt).ids], device=device)
        for mode, kwargs in (("greedy", dict(do_sample=False)),
                             ("sampled", dict(do_sample=True, temperature=0.8, top_k=40, top_p=0.95))):
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=new_tokens, eos_token_id=eos_id, pad_token_id=eos_id,
                                     **kwargs)
            text = tokenizer.decode(out[0].tolist())
            samples.append({"prompt": prompt, "mode": mode, "text": text})
            print(f"--- {mode}: {text!r}", flush=True)
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare-corpus", metavar="OUT_TXT", help="write the corpus from the installed package and exit")
    parser.add_argument("--train-tokenizer", metavar="DIR", help="train the tokenizer on --corpus into DIR and exit")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--corpus", help="the corpus text written by --prepare-corpus")
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER_DIR, help="directory with tokenizer.json")
    parser.add_argument("--out", help="output directory for the checkpoint")
    parser.add_argument("--minutes", type=float, default=4.0, help="training time budget (the schedule ends there)")
    parser.add_argument("--max-epochs", type=float, default=50.0,
                        help="epoch cap: the schedule ends at whichever of time and epochs comes first")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="a few CPU steps of a tiny model")
    parser.add_argument("--smoke-steps", type=int, default=5)
    args = parser.parse_args()

    if args.prepare_corpus:
        prepare_corpus(args.prepare_corpus)
        return
    if not args.corpus:
        parser.error("--corpus is required")
    if args.train_tokenizer:
        train_tokenizer(args.corpus, args.train_tokenizer, args.vocab_size)
        return
    if not args.out:
        parser.error("--out is required")
    train(args)


if __name__ == "__main__":
    main()
