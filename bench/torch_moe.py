"""PyTorch side of the MoE benchmark: the same cases and timing method as bench/moe_bench.cpp
(CUDA graph of 16 calls over 16 different inputs, so each call routes to other experts and the
weights stream from HBM; median of 15 replays / 16). Plain PyTorch following HF transformers'
integrations/moe.py (spec section 4c), no model downloads:
  moe_layer          router -> softmax/sigmoid -> topk -> renormalise -> argsort(stable) ->
                     histc -> cumsum(int32) -> torch._grouped_mm x2 -> silu*up -> weights ->
                     un-permute -> index_add (+ sigmoid-gated shared expert)
  moe_layer_batched  transformers' decode path: per-(token, slot) expert weights gathered and
                     multiplied with bmm (T <= 16: beyond that the gathered weights exceed memory)
  grouped_mm         torch._grouped_mm alone on the gate_up shape (FP8: torch._scaled_grouped_mm
                     with rowwise scales, the FP8 grouped layout torch supports)
FP8 layer: experts rowwise-quantised, activations quantised rowwise on the fly, _scaled_grouped_mm.
Prints one JSON object per case."""
import json
import sys

import torch
import torch.nn.functional as F

from timing import time_graph

INPUTS = 16
F8 = torch.float8_e4m3fn
MODELS = [  # name, experts, hidden, inter, top_k, shared_inter, scoring, expert_bias
    ("qwen3-30b-a3b", 128, 2048, 768, 8, 0, "softmax", False),
    ("qwen3.5-35b-a3b", 256, 2048, 512, 8, 512, "softmax", False),
    ("lfm2-8b-a1b", 32, 2048, 1792, 4, 0, "sigmoid", True),
]
TOKENS = [1, 2, 4, 8, 16, 64, 512]


def quantize_rowwise(w):
    """float8 e4m3fn codes and fp32 decoding scales per row of the last dim."""
    s = w.float().abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 448
    return (w.float() / s).clamp(-448, 448).to(F8), s.squeeze(-1)


class Layer:
    def __init__(self, e, h, inter, k, shared_inter, scoring, bias, fp8):
        g = torch.Generator(device="cuda").manual_seed(0)
        self.k, self.e, self.inter, self.scoring, self.fp8 = k, e, inter, scoring, fp8
        self.gate_up = torch.randn(e, 2 * inter, h, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        self.down = torch.randn(e, h, inter, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        self.router = torch.randn(e, h, device="cuda", dtype=torch.bfloat16, generator=g) * 0.05
        self.bias = torch.rand(e, device="cuda", generator=g) * 0.01 if bias else None
        self.shared = None
        if shared_inter:
            self.shared = (torch.randn(2 * shared_inter, h, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02,
                           torch.randn(h, shared_inter, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02,
                           torch.randn(1, h, device="cuda", dtype=torch.bfloat16, generator=g) * 0.05)
        if fp8:
            self.gate_up_q, self.gate_up_s = quantize_rowwise(self.gate_up)
            self.down_q, self.down_s = quantize_rowwise(self.down)

    def route(self, x):
        logits = F.linear(x, self.router)                                   # [T, E]
        if self.scoring == "softmax":
            p = F.softmax(logits, dim=-1, dtype=torch.float)
            w, ids = torch.topk(p, self.k, dim=-1)
            w = w / w.sum(-1, keepdim=True)
        else:
            s = logits.sigmoid()
            _, ids = torch.topk(s + self.bias, self.k, dim=-1)
            w = torch.gather(s, 1, ids)
            w = w / (w.sum(-1, keepdim=True) + 1e-6)
        return w.to(x.dtype), ids

    def experts_mm(self, x, which, offs):
        if not self.fp8:
            w = self.gate_up if which == 0 else self.down
            return torch._grouped_mm(x, w.transpose(-2, -1), offs)
        q, s = (self.gate_up_q, self.gate_up_s) if which == 0 else (self.down_q, self.down_s)
        xq, xs = quantize_rowwise(x)
        return torch._scaled_grouped_mm(xq, q.transpose(-2, -1), xs, s, offs=offs, out_dtype=torch.bfloat16)

    def shared_out(self, x):
        sgu, sdown, sgate = self.shared
        gu = F.linear(x, sgu)
        gate, up = gu.chunk(2, dim=-1)
        return torch.sigmoid(F.linear(x, sgate)) * F.linear(F.silu(gate) * up, sdown)

    def forward_grouped(self, x):
        t = x.shape[0]
        w, top_ids = self.route(x)                                          # [T, k]
        expert_ids = top_ids.flatten()                                      # [T*k]
        token_idx = torch.arange(t, device=x.device).repeat_interleave(self.k)
        perm = torch.argsort(expert_ids, stable=True)
        inv_perm = torch.argsort(perm)
        counts = torch.histc(expert_ids[perm].float(), bins=self.e, min=0, max=self.e - 1)
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        xs = x[token_idx][perm]                                             # [T*k, H]
        gu = self.experts_mm(xs, 0, offs)                                   # [T*k, 2I]
        gate, up = gu.chunk(2, dim=-1)
        y = self.experts_mm(F.silu(gate) * up, 1, offs)                     # [T*k, H]
        y = y * w.flatten()[perm].unsqueeze(-1)
        y = y[inv_perm]
        out = torch.zeros_like(x).index_add_(0, token_idx, y)
        if self.shared is not None:
            out = out + self.shared_out(x)
        return out

    def forward_batched(self, x):
        t = x.shape[0]
        w, top_ids = self.route(x)
        expert_ids = top_ids.flatten()
        token_idx = torch.arange(t, device=x.device).repeat_interleave(self.k)
        xs = x[token_idx]                                                   # [T*k, H]
        gu = torch.bmm(self.gate_up[expert_ids], xs.unsqueeze(-1)).squeeze(-1)
        gate, up = gu.chunk(2, dim=-1)
        y = torch.bmm(self.down[expert_ids], (F.silu(gate) * up).unsqueeze(-1)).squeeze(-1)
        y = y * w.flatten().unsqueeze(-1)
        out = torch.zeros_like(x).index_add_(0, token_idx, y)
        if self.shared is not None:
            out = out + self.shared_out(x)
        return out


def emit(op, case, fn_list, gbytes=None, **extra):
    try:
        us = time_graph(fn_list)
        row = {"impl": "torch", "op": op, "case": case, "us": us, **extra}
        if gbytes is not None:
            row["gbps"] = gbytes / us * 1e3
    except Exception as exc:  # report and go on: one unsupported path must not end the run
        row = {"impl": "torch", "op": op, "case": case, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(row), flush=True)


def main():
    tokens = [int(a) for a in sys.argv[1:]] or TOKENS
    for name, e, h, inter, k, shared_inter, scoring, bias in MODELS:
        for fp8 in (False, True):
            layer = Layer(e, h, inter, k, shared_inter, scoring, bias, fp8)
            dt = "fp8" if fp8 else "bf16"
            for t in tokens:
                case = f"{name} T={t} {dt}"
                gen = torch.Generator(device="cuda").manual_seed(t)
                xs = [torch.randn(t, h, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(INPUTS)]
                emit("moe_layer", case, [lambda x=x: layer.forward_grouped(x) for x in xs],
                     path="grouped_mm (rowwise _scaled_grouped_mm)" if fp8 else "grouped_mm")
                if t <= 16 and not fp8:
                    emit("moe_layer_batched", case, [lambda x=x: layer.forward_batched(x) for x in xs], path="batched_mm")
                # grouped_mm alone over each input's routing.
                rows, offs = [], []
                for x in xs:
                    _, ids = layer.route(x)
                    counts = torch.histc(ids.flatten().float(), bins=e, min=0, max=e - 1)
                    offs.append(torch.cumsum(counts, dim=0, dtype=torch.int32))
                    rows.append(torch.randn(t * k, h, device="cuda", dtype=torch.bfloat16, generator=gen))
                if fp8:
                    emit("grouped_mm", case, [lambda i=i: layer.experts_mm(rows[i], 0, offs[i]) for i in range(INPUTS)])
                else:
                    emit("grouped_mm", case, [lambda i=i: torch._grouped_mm(rows[i], layer.gate_up.transpose(-2, -1), offs[i])
                                              for i in range(INPUTS)])
            del layer
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
