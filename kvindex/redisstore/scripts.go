package redisstore

// The Lua scripts. Every name a script builds starts with the prefix
// (ARGV[1]); engine hashes and local keys travel as decimal strings and are
// never used as Lua numbers (doubles cannot hold a uint64). Layout: see the
// package doc.
//
// Every script first compares the prefix's generation key ("gen") with the
// token the caller holds (its generation), in the same atomic call: when
// the key is missing or differs, Redis lost the data the caller's tables
// describe, and the script does nothing but say so.

// applyScript applies one engine's batch of ops atomically.
// ARGV: prefix, engine name, capacity, writer id ("" = no lease), lease ms,
// generation token, then 5 per op: kind, hash, key, medium, group.
// A store on an unusable medium or group is skipped and counted as rejected.
// Returns {eid, added, refreshed, removed, unknown, cleared, remapped,
// evicted, rejected, status, detail}: status 0 ok, 1 an unknown op kind at
// op index detail,
// 2 not the engine's writer (nothing applied), 3 ok after taking the lease
// over (the engine's entries were made uncertain first), 4 the generation
// is lost (nothing applied).
const applyScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[6] then return {0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0} end
local name = ARGV[2]
local cap = tonumber(ARGV[3])
local writer = ARGV[4]
local ttl = tonumber(ARGV[5])
local EP, ST = P .. 'ep', P .. 'st'
local c = {0, 0, 0, 0, 0, 0, 0, 0} -- added refreshed removed unknown cleared remapped evicted rejected
local status = 0

local eid = redis.call('HGET', P .. 'eid', name)
if not eid then
  eid = tostring(redis.call('HINCRBY', ST, 'engines', 1))
  redis.call('HSET', P .. 'eid', name, eid)
  redis.call('HSET', P .. 'ename', eid, name)
  redis.call('HSET', EP, eid, 0)
  redis.call('INCR', P .. 'epv')
end

if writer ~= '' then
  local own = P .. 'own:' .. eid
  local cur = redis.call('GET', own)
  if cur and cur ~= writer then
    return {eid, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0}
  end
  if not cur then
    redis.call('SET', own, writer, 'PX', ttl)
    if tonumber(redis.call('HGET', P .. 'mc', eid) or '0') > 0 then
      -- Another writer left this engine's entries: what it missed since is
      -- unknown, so they are uncertain until stored again.
      redis.call('HINCRBY', EP, eid, 1)
      redis.call('INCR', P .. 'epv')
      redis.call('HINCRBY', ST, 'takeovers', 1)
      status = 3
    end
  else
    redis.call('PEXPIRE', own, ttl)
  end
end

local epoch = redis.call('HGET', EP, eid)
-- Gauges kept in st change by these deltas, written once at the end.
local dblocks, dmaps, devicted = 0, 0, 0

-- Engine maps: engine e's mappings are in m:e while it has at most mt of
-- them (level 0); past mt*10^l they move to level l+1, 10^(l+1) buckets
-- m:e:D… named by the last l+1 digits of the hash, up to level 3. ml
-- holds each engine's level, mc its number of mappings.
local mt = tonumber(redis.call('GET', P .. 'mt') or '128')
local levels = {}
local function level(e)
  local l = levels[e]
  if not l then
    l = tonumber(redis.call('HGET', P .. 'ml', e) or '0')
    levels[e] = l
  end
  return l
end
local function mapKey(e, h, l)
  l = l or level(e)
  if l == 0 then return P .. 'm:' .. e end
  return P .. 'm:' .. e .. ':' .. string.sub(string.rep('0', l) .. h, -l)
end
-- mapKeys lists every bucket of engine e's maps at its level.
local function mapKeys(e)
  local l = level(e)
  if l == 0 then return {P .. 'm:' .. e} end
  local out = {}
  local fmt = '%0' .. l .. 'd'
  for d = 0, 10 ^ l - 1 do out[#out + 1] = P .. 'm:' .. e .. ':' .. string.format(fmt, d) end
  return out
end
local nm0 = tonumber(redis.call('HGET', P .. 'mc', eid) or '0')
local nm = nm0
local function mapsDelta(e, d)
  dmaps = dmaps + d
  if e == eid then nm = nm + d else redis.call('HINCRBY', P .. 'mc', e, d) end
end
-- grow moves engine eid's mappings one level up when it has more than
-- mt per bucket.
local function grow()
  local l = level(eid)
  if l >= 3 or nm <= mt * 10 ^ l then return end
  for _, k in ipairs(mapKeys(eid)) do
    local all = redis.call('HGETALL', k)
    if #all > 0 then
      redis.call('DEL', k)
      for i = 1, #all, 2 do redis.call('HSET', mapKey(eid, all[i], l + 1), all[i], all[i + 1]) end
    end
  end
  levels[eid] = l + 1
  redis.call('HSET', P .. 'ml', eid, l + 1)
end
local nent0 = tonumber(redis.call('HGET', ST, 'entries') or '0')
local nent = nent0
local seq0 = tonumber(redis.call('GET', P .. 'seq') or '0')
local seq = seq0
-- The store order: entry seq sits in bucket q:floor(seq/64), a hash of
-- seq -> "E:hash:M:G"; qh is the lowest bucket that may hold entries.
local qh0 = tonumber(redis.call('GET', P .. 'qh') or '0')
local qh = qh0
local head = nil -- the head bucket's entries sorted by seq, while valid
local function bucket(sq)
  return P .. 'q:' .. string.format('%d', math.floor(sq / 64))
end

-- Blocks: the entries of block KEY are one field of hash b:<the last bd
-- digits of KEY>, "E:hash:M:G,epoch:seq,E:hash:M:G,epoch:seq…".
local bd = tonumber(redis.call('GET', P .. 'bd') or '4')
local function blockOf(key)
  return P .. 'b:' .. string.sub(key, -bd)
end
-- entryGet returns the value of entry field of block key, or nil.
local function entryGet(key, field)
  local v = redis.call('HGET', blockOf(key), key)
  if not v then return nil end
  local parts = {}
  for x in string.gmatch(v, '[^,]+') do parts[#parts + 1] = x end
  for i = 1, #parts, 2 do
    if parts[i] == field then return parts[i + 1] end
  end
  return nil
end
-- entrySet sets entry field of block key to val; true when the block is new.
local function entrySet(key, field, val)
  local B = blockOf(key)
  local v = redis.call('HGET', B, key)
  if not v then
    redis.call('HSET', B, key, field .. ',' .. val)
    return true
  end
  local t = {}
  for x in string.gmatch(v, '[^,]+') do t[#t + 1] = x end
  for i = 1, #t, 2 do
    if t[i] == field then
      t[i + 1] = val
      redis.call('HSET', B, key, table.concat(t, ','))
      return false
    end
  end
  redis.call('HSET', B, key, v .. ',' .. field .. ',' .. val)
  return false
end
-- entryDel removes entry field of block key: its value (nil when it was
-- not there) and whether the block is now empty.
local function entryDel(key, field)
  local B = blockOf(key)
  local v = redis.call('HGET', B, key)
  if not v then return nil, false end
  local t, old = {}, nil
  local parts = {}
  for x in string.gmatch(v, '[^,]+') do parts[#parts + 1] = x end
  for i = 1, #parts, 2 do
    if parts[i] == field then
      old = parts[i + 1]
    else
      t[#t + 1] = parts[i]
      t[#t + 1] = parts[i + 1]
    end
  end
  if not old then return nil, false end
  if #t == 0 then
    redis.call('HDEL', B, key)
    return old, true
  end
  redis.call('HSET', B, key, table.concat(t, ','))
  return old, false
end

local function split(v)
  local key, rest = string.match(v, '^(%d+)|?(.*)$')
  local mgs = {}
  for mg in string.gmatch(rest, '[^|]+') do mgs[#mgs + 1] = mg end
  return key, mgs
end

local function join(key, mgs)
  if #mgs == 0 then return key end
  return key .. '|' .. table.concat(mgs, '|')
end

-- delEntry removes one entry's block field ("epoch:seq") and its place
-- in the store order.
local function delEntry(key, e, h, mg)
  local v, empty = entryDel(key, e .. ':' .. h .. ':' .. mg)
  if not v then return end
  if empty then dblocks = dblocks - 1 end
  local sq = string.match(v, ':(%d+)$')
  if sq then
    redis.call('HDEL', bucket(tonumber(sq)), sq)
    if math.floor(tonumber(sq) / 64) == qh then head = nil end
  end
  nent = nent - 1
end

-- dropGroup removes every entry of engine e's hash h (mapped to key).
local function dropGroup(e, h, key, mgs)
  for _, mg in ipairs(mgs) do delEntry(key, e, h, mg) end
  redis.call('HDEL', mapKey(e, h), h)
  mapsDelta(e, -1)
  return #mgs
end

-- unmapOne takes mg out of engine e's mapping of h (the entry is gone).
local function unmapOne(e, h, mg)
  local MM = mapKey(e, h)
  local v = redis.call('HGET', MM, h)
  if not v then return end
  local key, mgs = split(v)
  for i, x in ipairs(mgs) do
    if x == mg then table.remove(mgs, i) break end
  end
  if #mgs == 0 then
    redis.call('HDEL', MM, h)
    mapsDelta(e, -1)
  else
    redis.call('HSET', MM, h, join(key, mgs))
  end
end

-- oldest returns the oldest entry's seq (a string) and "E:hash:M:G",
-- moving qh past empty buckets; nil when there is none.
local function oldest()
  while not head or #head == 0 do
    local all = redis.call('HGETALL', P .. 'q:' .. string.format('%d', qh))
    if #all == 0 then
      -- The bucket of the last seq stays the head: the next stores go there.
      if qh >= math.floor(seq / 64) then return nil end
      qh = qh + 1
    else
      head = {}
      for i = 1, #all, 2 do head[#head + 1] = {tonumber(all[i]), all[i], all[i + 1]} end
      -- descending, so the oldest is popped off the end
      table.sort(head, function(a, b) return a[1] > b[1] end)
    end
  end
  local x = head[#head]
  return x[2], x[3]
end

local function evict()
  while nent > cap do
    local sq, id = oldest()
    if not sq then return end
    head[#head] = nil
    redis.call('HDEL', bucket(tonumber(sq)), sq)
    nent = nent - 1
    local e, h, mg = string.match(id, '^(%d+):(%d+):(%d+:%d+)$')
    local v = redis.call('HGET', mapKey(e, h), h)
    if v then
      local key = string.match(v, '^(%d+)')
      local _, empty = entryDel(key, e .. ':' .. h .. ':' .. mg)
      if empty then dblocks = dblocks - 1 end
      unmapOne(e, h, mg)
    end
    c[7] = c[7] + 1
    devicted = devicted + 1
  end
end

local mids = {}
local function mediumID(med, create)
  local id = mids[med]
  if id then return id end
  id = redis.call('HGET', P .. 'mid', med)
  if id then mids[med] = id end
  if id or not create then return id end
  if med == '' or #med > 64 or redis.call('HLEN', P .. 'mid') >= 64 then return nil end
  id = tostring(redis.call('HINCRBY', ST, 'mediums', 1))
  redis.call('HSET', P .. 'mid', med, id)
  redis.call('HSET', P .. 'mname', id, med)
  mids[med] = id
  return id
end

local function store(h, key, med, grp)
  local mid = mediumID(med, true)
  local g = tonumber(grp)
  if not mid or not g or g < 0 or g > 255 then return false end
  local mg = mid .. ':' .. grp
  local v = redis.call('HGET', mapKey(eid, h), h)
  local mkey, mgs
  if v then
    mkey, mgs = split(v)
    if mkey ~= key then
      c[6] = c[6] + 1
      c[3] = c[3] + dropGroup(eid, h, mkey, mgs)
      v = nil
    end
  end
  local field = eid .. ':' .. h .. ':' .. mg
  if v then
    for _, x in ipairs(mgs) do
      if x == mg then
        local old = entryGet(key, field) or ''
        entrySet(key, field, epoch .. ':' .. (string.match(old, ':(%d+)$') or '0'))
        c[2] = c[2] + 1
        return true
      end
    end
    mgs[#mgs + 1] = mg
    redis.call('HSET', mapKey(eid, h), h, join(key, mgs))
  else
    redis.call('HSET', mapKey(eid, h), h, key .. '|' .. mg)
    mapsDelta(eid, 1)
    grow()
  end
  seq = seq + 1
  local sq = string.format('%d', seq)
  if entrySet(key, field, epoch .. ':' .. sq) then dblocks = dblocks + 1 end
  redis.call('HSET', bucket(seq), sq, field)
  if math.floor(seq / 64) == qh then head = nil end
  nent = nent + 1
  c[1] = c[1] + 1
  evict()
  return true
end

local function remove(h, med, grp)
  local mid = mediumID(med, false)
  local v = redis.call('HGET', mapKey(eid, h), h)
  if not mid or not v then c[4] = c[4] + 1 return end
  local mg = mid .. ':' .. grp
  local key, mgs = split(v)
  for _, x in ipairs(mgs) do
    if x == mg then
      delEntry(key, eid, h, mg)
      unmapOne(eid, h, mg)
      c[3] = c[3] + 1
      return
    end
  end
  c[4] = c[4] + 1
end

local function clear()
  for _, k in ipairs(mapKeys(eid)) do
    local all = redis.call('HGETALL', k)
    for i = 1, #all, 2 do
      local key, mgs = split(all[i + 1])
      c[5] = c[5] + dropGroup(eid, all[i], key, mgs)
    end
  end
  if level(eid) > 0 then
    levels[eid] = 0
    redis.call('HDEL', P .. 'ml', eid)
  end
  epoch = tostring(redis.call('HINCRBY', EP, eid, 1))
  redis.call('INCR', P .. 'epv')
end

local function flush()
  if dblocks ~= 0 then redis.call('HINCRBY', ST, 'blocks', dblocks) end
  if dmaps ~= 0 then redis.call('HINCRBY', ST, 'mappings', dmaps) end
  if devicted ~= 0 then redis.call('HINCRBY', ST, 'evicted', devicted) end
  if seq ~= seq0 then redis.call('SET', P .. 'seq', string.format('%d', seq)) end
  if qh ~= qh0 then redis.call('SET', P .. 'qh', string.format('%d', qh)) end
  if nent ~= nent0 then redis.call('HINCRBY', ST, 'entries', nent - nent0) end
  if nm ~= nm0 then redis.call('HSET', P .. 'mc', eid, nm) end
end

local n = (#ARGV - 6) / 5
for i = 0, n - 1 do
  local b = 7 + i * 5
  local kind = ARGV[b]
  if kind == '1' then
    if not store(ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]) then
      c[8] = c[8] + 1
    end
  elseif kind == '2' then
    remove(ARGV[b + 1], ARGV[b + 3], ARGV[b + 4])
  elseif kind == '3' then
    clear()
  elseif kind == '4' then
    epoch = tostring(redis.call('HINCRBY', EP, eid, 1))
    redis.call('INCR', P .. 'epv')
  else
    flush()
    return {eid, c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], 1, i}
  end
end
flush()
return {eid, c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], status, 0}
`

// holdersScript reads the holders of ARGV[5..] in order, stopping after
// the first key nobody holds past the first ARGV[4] keys (a sharded store
// reads a shard on to where another shard's walk reached). ARGV[1] is the
// prefix, ARGV[2] the generation token, ARGV[3] the version of the
// engines' epochs the caller holds (epv, bumped at every epoch change and
// new engine). It parses nothing (Lua
// string work is the slow part of a script): it returns the current
// version, the epochs as one string "E,epoch,E,epoch…" only when the
// caller's version is not current (else false), then one string per key,
// "E:hash:M:G,epoch:seq,E:hash:M:G,epoch:seq…" ("" for a key nobody holds); an
// empty array when the generation is lost. The caller computes trust (an
// entry's epoch equals its engine's).
const holdersScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return {} end
local v = redis.call('GET', P .. 'epv') or '0'
local out = {v, false}
if v ~= ARGV[3] then out[2] = table.concat(redis.call('HGETALL', P .. 'ep'), ',') end
local bd = tonumber(redis.call('GET', P .. 'bd') or '4')
local nostop = tonumber(ARGV[4])
for i = 5, #ARGV do
  local e = redis.call('HGET', P .. 'b:' .. string.sub(ARGV[i], -bd), ARGV[i]) or ''
  out[#out + 1] = e
  if e == '' and i - 4 > nostop then break end
end
return out
`

// prefixScript is holdersScript for a sharded store's PrefixHolders: it
// stops at the first key nobody holds, and takes the keys packed in one
// argument, ARGV[4], each a byte giving its length (1..20) and its decimal
// digits: Redis then converts one argument, not one per key, and the
// script reads only the keys it walks (a shard whose engines miss the
// first key reads one). ARGV[1..3] and the answer are holdersScript's.
const prefixScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return {} end
local v = redis.call('GET', P .. 'epv') or '0'
local out = {v, false}
if v ~= ARGV[3] then out[2] = table.concat(redis.call('HGETALL', P .. 'ep'), ',') end
local bd = tonumber(redis.call('GET', P .. 'bd') or '4')
local ks = ARGV[4]
local p, n = 1, #ks
while p < n do
  local l = string.byte(ks, p)
  local k = string.sub(ks, p + 1, p + l)
  p = p + 1 + l
  local e = redis.call('HGET', P .. 'b:' .. string.sub(k, -bd), k) or ''
  out[#out + 1] = e
  if e == '' then break end
end
return out
`

// renewScript renews, for ARGV[1]-prefixed keys, the leases of the engine
// ids ARGV[5..] that writer ARGV[2] still holds, to ARGV[3] ms, in
// generation ARGV[4]; -1 when the generation is lost.
const renewScript = `
local P, writer, ttl = ARGV[1], ARGV[2], ARGV[3]
if redis.call('GET', P .. 'gen') ~= ARGV[4] then return -1 end
local n = 0
for i = 5, #ARGV do
  local own = P .. 'own:' .. ARGV[i]
  if redis.call('GET', own) == writer then
    redis.call('PEXPIRE', own, ttl)
    n = n + 1
  end
end
return n
`

// resolveScript reads, in generation ARGV[2], the keys engine ARGV[3]'s
// hashes ARGV[4..] map to: {1, value or false per hash} ({1} when the
// engine is not known; an empty array when the generation is lost). HMGET
// takes the hashes in slices, as Lua's unpack has a bounded stack.
const resolveScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return {} end
local eid = redis.call('HGET', P .. 'eid', ARGV[3])
if not eid then return {1} end
local M = P .. 'm:' .. eid
local out = {1}
local l = tonumber(redis.call('HGET', P .. 'ml', eid) or '0')
if l > 0 then
  for i = 4, #ARGV do
    local h = ARGV[i]
    out[#out + 1] = redis.call('HGET', M .. ':' .. string.sub(string.rep('0', l) .. h, -l), h)
  end
  return out
end
for i = 4, #ARGV, 1000 do
  local vals = redis.call('HMGET', M, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  for j = 1, #vals do out[#out + 1] = vals[j] end
end
return out
`

// nameScript reads, in generation ARGV[2], the name of id ARGV[4] in table
// ARGV[3] ("ename" or "mname"): {1, name or false}; an empty array when the
// generation is lost.
const nameScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return {} end
return {1, redis.call('HGET', P .. ARGV[3], ARGV[4])}
`

// establishScript returns the generation token of prefix ARGV[1], setting
// it to ARGV[2] (a new random token) when there is none, with the number
// of digits of a block key that name its bucket (bd) to ARGV[3] unless
// set already (the data of a lost generation may be left over; its layout
// is kept).
const establishScript = `
if redis.call('EXISTS', ARGV[1] .. 'fifo') == 1 then
  return redis.error_reply('the index under this prefix has the layout of an older zmqguard (a sorted-set fifo key): use another prefix or delete its keys')
end
local K = ARGV[1] .. 'gen'
local t = redis.call('GET', K)
if t then return t end
redis.call('SET', K, ARGV[2])
redis.call('SET', ARGV[1] .. 'bd', ARGV[3], 'NX')
redis.call('SET', ARGV[1] .. 'mt', ARGV[4], 'NX')
return ARGV[2]
`

// positionsScript returns, in generation ARGV[2], {1, source, position,
// source, position…} from the positions hash; an empty array when the
// generation is lost.
const positionsScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return {} end
local out = redis.call('HGETALL', P .. 'pos')
table.insert(out, 1, 1)
return out
`

// savePositionScript sets, in generation ARGV[2], source ARGV[3]'s
// position to ARGV[4], or removes it when ARGV[4] is "": 1, or 0 when the
// generation is lost.
const savePositionScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return 0 end
if ARGV[4] == '' then
  redis.call('HDEL', P .. 'pos', ARGV[3])
else
  redis.call('HSET', P .. 'pos', ARGV[3], ARGV[4])
end
return 1
`
