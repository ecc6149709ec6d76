-- names.lua — the identifiers a generated C file declares at file scope,
-- read off the rendered text. The generator refuses a kernel name that
-- collides with one of them (M.collision, called by pipeline.generate): the
-- reserved template names are whatever the templates and emitters render,
-- not a list kept by hand.

local M = {}

-- The file's tokens: identifiers and single punctuation characters, with
-- comments, string and character literals and preprocessor lines other
-- than #define dropped. Macros come back in `macros`.
local function tokens(c)
  local toks, macros = {}, {}
  local i, n = 1, #c
  local bol = true -- at the beginning of a line (only blanks since the newline)
  while i <= n do
    local ch = c:sub(i, i)
    if ch == "\n" then
      bol = true
      i = i + 1
    elseif ch:match("%s") then
      i = i + 1
    elseif ch == "#" and bol then
      -- a preprocessor line, with its continuations
      local j = i
      repeat
        local e = c:find("\n", j, true) or n + 1
        local cont = c:sub(e - 1, e - 1) == "\\"
        j = e + 1
      until not cont or j > n
      local name, body = c:sub(i, j - 1):match("^#%s*define%s+([%a_][%w_]*)(.*)")
      if name then macros[name] = body:match("%f[%w_]static%f[^%w_]") and "static" or "macro" end
      i = j
      bol = true
    elseif c:sub(i, i + 1) == "/*" then
      local e = c:find("*/", i + 2, true)
      i = (e or n) + 2
    elseif c:sub(i, i + 1) == "//" then
      i = c:find("\n", i, true) or n + 1
    elseif ch == '"' or ch == "'" then
      local j = i + 1
      while j <= n do
        local d = c:sub(j, j)
        if d == "\\" then j = j + 2
        elseif d == ch then break
        else j = j + 1 end
      end
      toks[#toks + 1] = "0" -- a literal: a value, not a name
      i = j + 1
      bol = false
    else
      local id = c:match("^[%a_][%w_]*", i)
      if id then
        toks[#toks + 1] = id
        i = i + #id
      else
        local num = c:match("^[%d.][%w_.]*", i)
        if num then
          toks[#toks + 1] = "0"
          i = i + #num
        else
          toks[#toks + 1] = ch
          i = i + 1
        end
      end
      bol = false
    end
  end
  return toks, macros
end

-- Records a declaration: a name declared twice keeps its internal kind (a
-- static helper and an exported function of one name is the collision to
-- find).
local function put(out, id, kind)
  if kind ~= "extern" or out[id] == nil then out[id] = kind end
end

local function is_id(t) return t:match("^[%a_][%w_]*$") ~= nil end

-- The index of the token that closes the bracket opened at toks[i].
local CLOSE = { ["("] = ")", ["{"] = "}", ["["] = "]" }
local function skip(toks, i)
  local open, close, depth = toks[i], CLOSE[toks[i]], 0
  for j = i, #toks do
    if toks[j] == open then depth = depth + 1
    elseif toks[j] == close then
      depth = depth - 1
      if depth == 0 then return j end
    end
  end
  return #toks
end

-- The enumerators of the enum body opening at toks[i] ("{"), into out.
local function enumerators(toks, i, out, kind)
  local last = skip(toks, i)
  local expect = true
  local j = i + 1
  while j < last do
    local t = toks[j]
    if expect and is_id(t) then put(out, t, kind); expect = false
    elseif t == "," then expect = true
    elseif CLOSE[t] then j = skip(toks, j) end
    j = j + 1
  end
  return last
end

-- The declarator names of one file-scope declaration toks[a..b] (b: its ";"
-- or the "{" of a function body), with the kind of each: "static" (internal
-- linkage), "typedef" or "extern" (a name the file exports or links).
local function declarators(toks, a, b, out, macros)
  local kind = "extern"
  for j = a, b do
    if toks[j] == "static" or macros[toks[j]] == "static" then kind = "static"
    elseif toks[j] == "typedef" then kind = "typedef" end
  end
  local j, last = a, nil
  while j <= b do
    local t = toks[j]
    if t == "__attribute__" or t == "_Pragma" or t == "__asm__" or t == "asm" then
      if toks[j + 1] == "(" then j = skip(toks, j + 1) end
    elseif t == "struct" or t == "union" or t == "enum" then
      if is_id(toks[j + 1] or "") then j = j + 1 end -- a tag: its own namespace
      if toks[j + 1] == "{" then
        if t == "enum" then enumerators(toks, j + 1, out, "enum") end
        j = skip(toks, j + 1)
      end
    elseif is_id(t) then
      last = t
    elseif t == "(" then
      if toks[j + 1] == "*" and is_id(toks[j + 2] or "") then
        last = toks[j + 2] -- a pointer to a function: (*name)(...)
      end
      if last then put(out, last, kind) end
      last = nil
      j = skip(toks, j)
    elseif t == "[" then
      j = skip(toks, j)
    elseif t == "=" then
      if last then put(out, last, kind) end
      last = nil
      -- the initializer, up to the next "," or the end
      j = j + 1
      while j <= b and toks[j] ~= "," do
        if CLOSE[toks[j]] then j = skip(toks, j) end
        j = j + 1
      end
      j = j - 1
    elseif t == "," or t == ";" or j == b then
      if last then put(out, last, kind) end
      last = nil
    end
    j = j + 1
  end
  if last then put(out, last, kind) end
end

-- name -> kind ("macro", "enum", "static", "typedef", "extern") of every
-- identifier the C text declares at file scope.
function M.declared(c)
  local toks, macros = tokens(c)
  local out = {}
  for m in pairs(macros) do put(out, m, "macro") end
  local i, start = 1, 1
  while i <= #toks do
    local t = toks[i]
    if t == ";" then
      declarators(toks, start, i, out, macros)
      start = i + 1
    elseif t == "{" then
      local prev = toks[i - 1]
      if prev == ")" then
        -- a function body: the declaration ends at its head
        declarators(toks, start, i - 1, out, macros)
        i = skip(toks, i)
        start = i + 1
      elseif prev == "=" then
        i = skip(toks, i) -- an initializer; the declaration goes on to its ";"
      elseif toks[i - 2] == "extern" and prev == "0" then
        start = i + 1 -- extern "C" {
      else
        i = skip(toks, i) -- a struct, union or enum body: declarators() reads it
      end
    elseif t == "}" then
      start = i + 1 -- the end of an extern "C" block
    end
    i = i + 1
  end
  return out
end

-- The names a kernel exports: those its header declares that derive from
-- the kernel's name (the function, NAME_params, NAME_... and the upper-case
-- NAME_... macros, the include guard HEED_NAME_H).
local function exported(name, h)
  local up = name:upper()
  local out = { [name] = true }
  for id in pairs(M.declared(h)) do
    if id:sub(1, #name + 1) == name .. "_" or id:sub(1, #up + 1) == up .. "_" or id == "HEED_" .. name .. "_H" then
      out[id] = true
    end
  end
  return out
end

-- The first identifier (sorted) the kernel file r.c declares for itself
-- (macro, enum constant, static function or object, typedef) that is also
-- a name the kernel exports, or nil.
function M.collision(name, r)
  local ex = exported(name, r.h)
  local hits = {}
  for id, kind in pairs(M.declared(r.c)) do
    if ex[id] and kind ~= "extern" then hits[#hits + 1] = id end
  end
  table.sort(hits)
  return hits[1]
end

return M
