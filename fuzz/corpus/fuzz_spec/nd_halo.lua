-- HaloNet blocked local attention: 8 x 8 query blocks of a 32 x 32 map see
-- their 14 x 14 neighbourhood (halo 3); positions outside the map are zero
-- keys and values (HaloNet's padding).
return {
  name = "nd_halo",
  form = "halo",
  map = { 32, 32 }, block = 8, halo = 3, padding = "zero",
  heads = 2, dk = 32, dv = 32,
  fuse = "none",
  bias = { kind = "relative", clip = { 7, 7 } },
}
