#!/usr/bin/env python3
"""The same-run PyTorch reference for scripts/gpu-check.sh: GPT-2 124M (12 layers, hidden 768,
12 heads, vocab 50257, learned positions, GELU (tanh), LayerNorm eps 1e-5, biases, tied
embeddings: pretrain_gpt's defaults for those shapes) trained on random tokens with AdamW, the
matrix products and attention in bf16 under torch.autocast (PyTorch's mixed precision: fp32
weights and optimizer state), attention by scaled_dot_product_attention (causal, its flash
kernel), torch.compile where it works (else eager, and it says why).

Prints one line a reader can compare with the engine's: the median step time over the timed
steps (after the warm-up), tokens/s, the last loss, and what ran (compiled or eager, torch and
CUDA versions, GPU). Exit 0 when it trained, 1 otherwise.

  python3 scripts/gpt2_torch_reference.py --batch 16 --seq 1024 --steps 10 --warmup 3 [--no-compile]
"""
import argparse
import math
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="steps before the timed ones (compilation)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    for name in ("batch", "seq", "steps", "layers", "hidden", "heads", "vocab"):
        if getattr(a, name) < 1:
            sys.exit(f"gpt2_torch_reference: --{name} {getattr(a, name)}: must be at least 1")
    if a.hidden % a.heads:
        sys.exit(f"gpt2_torch_reference: --hidden {a.hidden} is not a multiple of --heads {a.heads}")

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        sys.exit("gpt2_torch_reference: torch sees no CUDA device")
    dev = "cuda"
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True

    class Block(nn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.H = H
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C)
            self.fc_out = nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.hidden)
            self.wpe = nn.Embedding(a.seq, a.hidden)
            self.blocks = nn.ModuleList(Block(a.hidden, a.heads) for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.hidden, eps=1e-5)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied
            return F.cross_entropy(logits.float().reshape(-1, a.vocab), targets.reshape(-1))

    model = GPT().to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    step_fn = model
    mode = "eager"
    if not a.no_compile:
        try:
            step_fn = torch.compile(model)
            mode = "torch.compile"
        except Exception as e:  # compile is lazy: most failures show at the first step, below
            mode = f"eager (torch.compile refused: {str(e).splitlines()[0][:120]})"

    gen = torch.Generator(device=dev).manual_seed(a.seed)

    def batch():
        t = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=gen)
        return t[:, :-1], t[:, 1:]

    def step():
        x, y = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    try:
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
    except Exception as e:
        if mode != "torch.compile":
            raise
        mode = f"eager (torch.compile failed: {str(e).splitlines()[0][:120]})"
        step_fn = model
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()

    times = []
    loss = None
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    tokens = a.batch * a.seq
    last = loss.item()
    if not math.isfinite(last):
        print(f"torch reference: loss {last} is not finite", file=sys.stderr)
        return 1
    print(f"torch reference: {tokens / med:.0f} tok/s, median step {med * 1e3:.2f} ms over {a.steps} steps "
          f"(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f}) after {a.warmup} warm-up; loss {last:.4f}; "
          f"{n_params / 1e6:.1f}M parameters, B {a.batch} T {a.seq}, bf16 autocast, {mode}; "
          f"torch {torch.__version__} CUDA {torch.version.cuda} on {torch.cuda.get_device_name(0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
