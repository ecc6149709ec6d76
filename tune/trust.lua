-- trust.lua — the rule libheed's loader applies before it loads anything
-- from the cache (runtime/cache.c hrt_cache_check and hrt_safe_owner,
-- runtime/loader.c), for what the Lua side runs or trusts there: owned by
-- the effective user, writable by neither group nor others, and not a
-- symbolic link (the cache directory itself may be one, as for the loader);
-- and the listing of one's own files in a directory, for the sweeps that
-- remove what heed left (tune/records.lua).

local util = require("util")

local format = string.format

local M = {}

local euid
function M.euid()
  if not euid then
    local h = io.popen("id -u")
    euid = h and h:read("*l")
    if h then h:close() end
    if not euid or not euid:match("^%d+$") then util.fail("run", "cannot tell the user id (id -u)") end
  end
  return euid
end

-- nil when path is a `kind` ("directory" or "regular file") that passes the
-- rule (follow: a symbolic link is followed, as the loader does for the
-- cache directory); else why not, "missing" when nothing is there. stat
-- opens nothing: a FIFO never blocks.
function M.unsafe(path, kind, follow)
  local h = io.popen(format("stat %s-c '%%u %%a %%F' -- %s 2>/dev/null", follow and "-L " or "",
    util.shquote(path)))
  local line = h and h:read("*l")
  if h then h:close() end
  local uid, mode, what = (line or ""):match("^(%d+) ([0-7]+) (.+)$")
  if not uid then return "missing" end
  if what == "regular empty file" then what = "regular file" end
  if what == "symbolic link" then return "a symbolic link" end
  if what ~= kind then return "not a " .. kind .. " (a " .. what .. ")" end
  if uid ~= M.euid() then return "owned by another user" end
  local m = tonumber(mode, 8)
  if math.floor(m / 16) % 2 == 1 or math.floor(m / 2) % 2 == 1 then
    return "writable by group or others (mode " .. mode .. ")"
  end
  return nil
end

-- The entries of dir owned by the effective user: a list of { name, type }
-- (find's %y: "f" file, "d" directory, "l" symbolic link...). Names are read
-- whole (NUL-separated), never split at a newline.
function M.own_entries(dir)
  local h = io.popen(format("find %s -mindepth 1 -maxdepth 1 -uid %s -printf '%%y %%f\\0' 2>/dev/null",
    util.shquote(dir .. "/"), M.euid()))
  local out = h and h:read("*a") or ""
  if h then h:close() end
  local list = {}
  local i = 1
  while true do
    local j = out:find("\0", i, true)
    if not j then break end
    local t, name = out:sub(i, j - 1):match("^(%a) (.*)$")
    if t then list[#list + 1] = { name = name, type = t } end
    i = j + 1
  end
  return list
end

return M
