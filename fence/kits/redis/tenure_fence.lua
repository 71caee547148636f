-- Tenure fencing kit for Redis: a fenced SET, DEL or HSET in one script.
--
-- A holder whose lease has passed to another (a GC pause, a partition) can
-- still send writes. This script makes Redis refuse them: it keeps the
-- highest fencing token seen for a lease in a fence key, and runs the write
-- only if the caller's token is not lower, advancing the fence key in the
-- same atomic step. The token must come from a fence proof the application
-- verified first (fence/<lang>, docs/fencing.md): the script compares
-- tokens, it does not check signatures. See fence/kits/README.md.
--
--   EVALSHA <sha> 2 <fence key> <data key> <token> <command> <args...>
--
--   KEYS[1]  the fence key of the lease, e.g. tenure:fence:{orders}
--   KEYS[2]  the key to write; in Redis Cluster it must share the fence
--            key's hash tag, e.g. orders:{orders}:total
--   ARGV[1]  the fencing token, a decimal string from 1 to 2^64-1
--   ARGV[2]  SET, DEL or HSET (any case)
--   ARGV[3+] the command's arguments after the key:
--              SET value [EX s | PX ms | NX | XX | KEEPTTL | GET ...]
--              DEL (none)
--              HSET field value [field value ...]
--
-- Reply: the command's own reply. Errors, by their first word:
--   FENCE_STALE          the token is lower than the fence key's; nothing written
--   FENCE_INVALID_TOKEN  the token is not a decimal from 1 to 2^64-1
--   FENCE_UNKNOWN_COMMAND the command is not SET, DEL or HSET
--   FENCE_USAGE          wrong number of keys or arguments
--   FENCE_CORRUPT        the fence key holds something that is not a token
-- An error of the command itself (WRONGTYPE...) is returned as is, and the
-- fence key is left unchanged.
--
-- Tokens are compared as decimal strings (length, then digit by digit):
-- Lua numbers are doubles and cannot tell 2^53+1 from 2^53.

local MAX_TOKEN = '18446744073709551615' -- 2^64 - 1
-- unpack() of more values than this overflows the Lua C stack (8000).
local MAX_COMMAND_ARGS = 7000

-- -1, 0 or 1 as canonical decimal a is below, equal to or above b.
local function compare(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = 1, #a do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end

-- The token as given if it is a canonical decimal from 1 to 2^64-1, else nil.
local function parse_token(s)
  if type(s) ~= 'string' or #s < 1 or #s > #MAX_TOKEN or not s:match('^[1-9][0-9]*$') then
    return nil
  end
  if compare(s, MAX_TOKEN) > 0 then
    return nil
  end
  return s
end

-- Shortens a caller-supplied string for an error message.
local function shown(s)
  if #s > 64 then
    return s:sub(1, 64) .. '...'
  end
  return s
end

if #KEYS ~= 2 then
  return redis.error_reply('FENCE_USAGE expected 2 keys (the fence key, then the data key), got ' .. #KEYS)
end
if KEYS[1] == KEYS[2] then
  return redis.error_reply('FENCE_USAGE the data key must not be the fence key ' .. shown(KEYS[1]))
end
if #ARGV < 2 then
  return redis.error_reply('FENCE_USAGE expected the token and a command (SET, DEL or HSET) as arguments')
end

local token = parse_token(ARGV[1])
if not token then
  return redis.error_reply('FENCE_INVALID_TOKEN fencing token "' .. shown(ARGV[1])
    .. '" is not a decimal number from 1 to ' .. MAX_TOKEN)
end

local command = string.upper(shown(ARGV[2]))
local nargs = #ARGV - 2
if nargs > MAX_COMMAND_ARGS then
  return redis.error_reply('FENCE_USAGE ' .. command .. ' with ' .. nargs
    .. ' arguments; at most ' .. MAX_COMMAND_ARGS .. ' in one call')
end
if command == 'SET' then
  if nargs < 1 then
    return redis.error_reply('FENCE_USAGE SET needs a value')
  end
elseif command == 'DEL' then
  if nargs ~= 0 then
    return redis.error_reply('FENCE_USAGE DEL takes no argument after the data key')
  end
elseif command == 'HSET' then
  if nargs < 2 or nargs % 2 ~= 0 then
    return redis.error_reply('FENCE_USAGE HSET needs field value pairs')
  end
else
  return redis.error_reply('FENCE_UNKNOWN_COMMAND ' .. command .. ' is not fenced by this script; use SET, DEL or HSET')
end

local highest = redis.call('GET', KEYS[1])
if highest and not parse_token(highest) then
  return redis.error_reply('FENCE_CORRUPT fence key ' .. shown(KEYS[1]) .. ' holds "' .. shown(highest)
    .. '", not a fencing token; it was written by something other than this script')
end
local order = highest and compare(token, highest) or 1
if order < 0 then
  return redis.error_reply('FENCE_STALE fencing token ' .. token .. ' is older than ' .. highest
    .. ', the highest seen for fence key ' .. shown(KEYS[1]) .. '; the lease has passed to another holder')
end

-- The write first: if it fails (WRONGTYPE...) the script stops here and the
-- fence key is unchanged, so nothing at all was written.
local reply = redis.call(command, KEYS[2], unpack(ARGV, 3))
if order > 0 then
  redis.call('SET', KEYS[1], token)
end
return reply
