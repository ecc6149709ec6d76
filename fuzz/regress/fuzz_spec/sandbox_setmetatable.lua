return { name = (setmetatable) and "SANDBOX_ESCAPED" or "ok", lq = 1, dk = 1 }
