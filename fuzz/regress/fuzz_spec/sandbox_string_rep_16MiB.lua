local s = ("x"):rep(2^24)
return { name = #s > 1048576 and "SANDBOX_ESCAPED" or "ok", lq = 1, dk = 1 }
