return {
  name = "local64_1024", heads = 4,
  lq = 1024, lk = 1024, dk = 64, dv = 64,
  fuse = "none",
  mask = { kind = "local", radius = 64 },
}
