-- The patches form's backward: the seed's fused attention pooling over
-- patches (a ViT-style 56 x 56 map of C = 64 channels cut into 7 x 7
-- patches, 64 tokens; linear f_q, f_k to 64 channels, identity f_v folded,
-- fuse mean): `heed bench bench/specs/bwd_nd_pool_56.lua --pass backward`
-- times NAME_backward (templates/nd_xbackward.c, plain loops: dx and the
-- maps' gradients) against the reference's (peer_naive,
-- runtime/ref_nd_xbackward.c); docs/backward.md, "Speed".
return { name = "bwd_nd_pool_56", form = "patches", channels = 64, map = { 56, 56 }, window = 7,
         f_q = { kind = "linear", out = 64 }, f_k = { kind = "linear", out = 64 }, g_v = "fold",
         fuse = "mean", backward = true }
