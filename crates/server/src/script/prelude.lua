-- What a worker's Lua state runs once, before any script: redis-server 7.0's script
-- environment (script_lua.c, eval.c) over the functions the server gives (H).
--   H.call and H.pcall: redis.call and redis.pcall (the server's own C functions, so a call in
--   a script's tail position keeps its line); a call that fails raises its error table
--   H.sha1hex(s), H.log(level, text), H.known(name)
--   H.setresp(version): the RESP version of the calls from now on and of the reply
--   H.where(): the line the innermost function of the script is at (nil: none runs)
-- Returns the error handler scripts run under, and the environment every script runs in
-- (globals readable, none writable; KEYS and ARGV set raw).
local H, G = ...
local where = H.where
local type, tostring, tonumber, error, select = type, tostring, tonumber, error, select
local raw_pcall, setmetatable, setfenv = pcall, setmetatable, setfenv
local raw_loadstring, concat, sub, find = loadstring, table.concat, string.sub, string.find

-- A script's error as redis-server reports it: a table with err, and the script's line.
local function handler(err)
  local line = where()
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if line then
    err.source = '@user_script'
    err.line = line
  end
  return err
end

local function readonly()
  error('Attempt to modify a readonly table', 2)
end

-- What getmetatable answers for a protected table (and a string): read-only itself.
local locked = setmetatable({}, {__newindex = readonly, __metatable = false})

local function protect(t)
  return setmetatable({}, {__index = t, __newindex = readonly, __metatable = locked})
end

local function raise(text)
  error({err = text})
end

local redis = {call = H.call, pcall = H.pcall}
redis.setresp = function(...)
  if select('#', ...) ~= 1 then
    raise('ERR redis.setresp() requires one argument.')
  end
  local version = tonumber((...))
  if version ~= 2 and version ~= 3 then
    raise('ERR RESP version must be 2 or 3.')
  end
  H.setresp(version)
end
redis.sha1hex = function(...)
  if select('#', ...) ~= 1 then
    raise('ERR wrong number of arguments')
  end
  return H.sha1hex(tostring((...)))
end
redis.error_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  if sub(text, 1, 1) == '-' then
    text = sub(text, 2)
  end
  if not find(text, ' ', 1, true) then
    text = 'ERR ' .. text
  end
  return {err = text}
end
redis.status_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = text}
end
redis.log = function(...)
  local count = select('#', ...)
  if count < 2 then
    raise('ERR redis.log() requires two arguments or more.')
  end
  local level = ...
  if type(level) ~= 'number' and tonumber(level) == nil then
    raise('ERR First argument must be a number (log level).')
  end
  level = tonumber(level)
  if level < 0 or level > 3 then
    raise('ERR Invalid debug level.')
  end
  local parts = {}
  for at = 2, count do
    local part = select(at, ...)
    if type(part) == 'string' or type(part) == 'number' then
      parts[#parts + 1] = tostring(part)
    end
  end
  H.log(level, concat(parts, ' '))
end
redis.set_repl = function(...)
  if select('#', ...) ~= 1 then
    raise('ERR redis.set_repl() requires two arguments.')
  end
  local flags = tonumber((...)) or -1
  if flags < 0 or flags > 3 then
    raise('ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.')
  end
end
redis.replicate_commands = function()
  return true
end
redis.acl_check_cmd = function(...)
  if select('#', ...) == 0 then
    raise('ERR Please specify at least one argument for this redis lib call')
  end
  if not H.known(tostring((...))) then
    raise('ERR Invalid command passed to redis.acl_check_cmd()')
  end
  return true
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.REDIS_VERSION, redis.REDIS_VERSION_NUM = '7.0.15', 458767

-- redis-server's pcall: an error table comes back as its text.
local function caught(ok, ...)
  if ok then
    return ok, ...
  end
  local err = ...
  if type(err) == 'table' and type(err.err) == 'string' then
    return false, err.err
  end
  return false, err
end

local env
local function loadstring(text, name)
  if type(text) == 'string' and sub(text, 1, 1) == '\27' then
    return nil, 'attempt to load a binary chunk'
  end
  local loaded, err = raw_loadstring(text, name)
  if loaded then
    setfenv(loaded, env)
  end
  return loaded, err
end

-- Lua 5.1's unpack counts its results in an int and never checks the stack: a range of 2^31
-- overflows, a wide one writes past the stack (redis-server patches its Lua the same way).
local raw_unpack = unpack
G.unpack = function(...)
  local t, i, j = ...
  local first = tonumber(i) or 1
  local last = tonumber(j) or (type(t) == 'table' and #t or 0)
  if first <= last and last - first >= 7999 then
    error('too many results to unpack', 2)
  end
  return raw_unpack(...)
end
local raw_setmetatable, raw_getmetatable = setmetatable, getmetatable
G.setmetatable = function(t, mt)
  if raw_getmetatable(t) == locked then
    error('Attempt to modify a readonly table', 2)
  end
  return raw_setmetatable(t, mt)
end
raw_getmetatable('').__metatable = locked
G.pcall = function(f, ...)
  return caught(raw_pcall(f, ...))
end
G.loadstring = loadstring
G.load = function(reader, name)
  if type(reader) == 'string' then
    return loadstring(reader, name)
  end
  local parts = {}
  while true do
    local part = reader()
    if part == nil or part == '' then
      break
    end
    parts[#parts + 1] = part
  end
  return loadstring(concat(parts), name)
end
G.redis = protect(redis)
for _, name in ipairs({'string', 'table', 'math', 'bit', 'cjson', 'cmsgpack', 'coroutine'}) do
  G[name] = protect(G[name])
end
-- newproxy too, as redis-server: a userdata's __gc function would run inside any allocation.
G.print, G.dofile, G.loadfile, G.require, G.module, G.newproxy = nil, nil, nil, nil, nil, nil
setmetatable(G, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = readonly,
  __metatable = locked,
})
env = setmetatable({}, {__index = G, __newindex = readonly, __metatable = locked})

-- The handler a script runs under (run.rs calls the script with lua_pcall and it), and the
-- environment (KEYS and ARGV set raw there before each run).
return handler, env
