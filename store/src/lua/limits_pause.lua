-- The pause left (ms), as every decision reads it (after limits_slowdown.lua; the recovery
-- passed only shapes the factor, which this leaves out).
-- KEYS: 1 slow.
local _, pause = slowdown(KEYS[1], now, 1)
return pause
