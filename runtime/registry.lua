-- registry.lua — the common problems libheed carries compiled in (its
-- "registry"): a list of spec tables, each a spec as `heed gen` takes it.
-- The build (mk/runtime.mk) writes each to a spec file with its name
-- prefixed by "hreg_", runs `./heed gen` on them with a kernel table, and
-- compiles the kernels into libheed. A problem planned with no wisdom is
-- found here by its canonical hash and confirmed by a full compare, so only
-- the operator matters, not the name. Keep the list short: each entry is
-- object code in every copy of the library.
return {
  -- The seed's fused attention (L inputs -> 1 output) over ViT patch tokens.
  { name = "vit_pool", heads = 8, lq = 196, lk = 196, dk = 64, dv = 64,
    score = "scaled_dot", norm = "softmax", fuse = "mean", mask = "none" },
  -- The main job's default spec (heed demo).
  { name = "default_pool", heads = 8, lq = 1024, lk = 1024, dk = 64, dv = 64,
    score = "scaled_dot", norm = "softmax", fuse = "mean", mask = "none" },
  -- ViT-B/16 self-attention: 197 tokens (CLS + 14x14), 12 heads of 64.
  { name = "vit_b16", heads = 12, lq = 197, lk = 197, dk = 64, dv = 64,
    score = "scaled_dot", norm = "softmax", fuse = "none", mask = "none" },
  -- BERT-base encoder self-attention at sequence 128 and 512.
  { name = "bert_128", heads = 12, lq = 128, lk = 128, dk = 64, dv = 64,
    score = "scaled_dot", norm = "softmax", fuse = "none", mask = "none" },
  { name = "bert_512", heads = 12, lq = 512, lk = 512, dk = 64, dv = 64,
    score = "scaled_dot", norm = "softmax", fuse = "none", mask = "none" },
  -- GPT-2 small causal self-attention at context 1024.
  { name = "gpt2_1024", heads = 12, lq = 1024, lk = 1024, dk = 64, dv = 64,
    score = "scaled_dot", norm = "softmax", fuse = "none", mask = "causal" },
  -- Sliding-window (local) attention, radius 64, over 1024 tokens.
  { name = "local_1024", heads = 8, lq = 1024, lk = 1024, dk = 64, dv = 64,
    score = "scaled_dot", norm = "softmax", fuse = "none", mask = { kind = "local", radius = 64 } },
  -- Small problems: one head of 64 tokens (tests, examples, quick starts).
  { name = "small_std", heads = 1, lq = 64, lk = 64, dk = 32, dv = 32,
    score = "scaled_dot", norm = "softmax", fuse = "none", mask = "none" },
  { name = "small_pool", heads = 1, lq = 64, lk = 64, dk = 32, dv = 32,
    score = "scaled_dot", norm = "softmax", fuse = "mean", mask = "none" },
}
