local s = ("a"):rep(40)
local p = ("a*"):rep(40) .. "b"
return { name = s:find(p) and "x" or "ok", lq = 1, dk = 1 }
