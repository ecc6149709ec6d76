return { name = (_G) and "SANDBOX_ESCAPED" or "ok", lq = 1, dk = 1 }
