package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// delivery is a job's stream entry as the worker got it: over says why
// it was not read (a field past MaxBodyBytes; its value then empty);
// deliveries is how many times the group delivered it, this one counted
// (1 for a new entry read, the pending entry's count for one claimed).
type delivery struct {
	redis.XMessage
	over       string
	deliveries int64
}

// pollEvery is how often a worker with free slots asks for new jobs
// while the stream has none (a script cannot block). The same for every
// worker: which of them takes the next job is chance, as a blocked
// XREADGROUP's turns would be, never the one that took the last.
const pollEvery = 20 * time.Millisecond

// capEntries (Lua) bounds stream entries inside Redis: an entry with a
// field longer than ARGV[3] bytes, or fields longer than that plus 64 KiB
// together, is returned with its fields emptied and why, so that the
// worker never reads more than the bound of one job.
const capEntries = `
local function cap(entries, max)
  local out = {}
  for _, e in ipairs(entries) do
    local fields = e[2]
    if fields then
      local over, total = '', 0
      for j = 1, #fields do
        local n = string.len(fields[j])
        total = total + n
        if over == '' and j % 2 == 0 and n > max then
          local name = fields[j-1]
          if string.len(name) > 64 then name = string.sub(name, 1, 64) .. '...' end
          over = 'field ' .. name .. ' of the job is ' .. n .. ' bytes, beyond the ' .. max .. ' this service takes (--max-body): not read'
        end
      end
      if over == '' and total > max + 65536 then
        over = 'the job\'s fields are ' .. total .. ' bytes, beyond the ' .. max .. ' this service takes (--max-body) and 64 KiB: not read'
      end
      if over ~= '' then
        local kept = {}
        for j = 1, #fields - 1, 2 do
          local name = fields[j]
          if name == 'id' or name == 'endpoint' then
            if string.len(fields[j+1]) <= 1024 then
              table.insert(kept, name)
              table.insert(kept, fields[j+1])
            end
          end
        end
        fields = kept
      end
      table.insert(out, {e[1], fields, over})
    end
  end
  return out
end
`

// readScript delivers up to ARGV[4] new entries to consumer ARGV[2] of
// group ARGV[1] (XREADGROUP, which does not block in a script), bounded
// by capEntries, each with its count of deliveries: 1, a new entry's.
var readScript = redis.NewScript(capEntries + `
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[4], 'STREAMS', KEYS[1], '>')
if not r then return {} end
local out = cap(r[1][2], tonumber(ARGV[3]))
for _, e in ipairs(out) do e[4] = 1 end
return out
`)

// claimScript claims entries ARGV[5...] idle for ARGV[4] ms for consumer
// ARGV[2] of group ARGV[1] (XCLAIM, which counts a delivery), bounded by
// capEntries, each with its count of deliveries as its pending entry
// has it now.
var claimScript = redis.NewScript(capEntries + `
local r = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], unpack(ARGV, 5))
local out = cap(r, tonumber(ARGV[3]))
for _, e in ipairs(out) do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
  e[4] = 1
  if p[1] then e[4] = p[1][4] end
end
return out
`)

// read delivers up to n new jobs to this worker, bounded (readScript).
func (w *Worker) read(ctx context.Context, n int) ([]delivery, error) {
	got, err := readScript.Run(ctx, w.rdb, []string{w.keys.Jobs}, w.cfg.Group, w.cfg.Name, w.cfg.MaxBodyBytes, n).Result()
	if err != nil {
		return nil, err
	}
	return deliveries(got)
}

// deliveries are the scripts' answer: entries of id, fields, why not
// read (capEntries) and count of deliveries.
func deliveries(got any) ([]delivery, error) {
	entries, ok := got.([]any)
	if !ok {
		return nil, fmt.Errorf("reading jobs: an answer of %T", got)
	}
	var out []delivery
	for _, e := range entries {
		parts, ok := e.([]any)
		if !ok || len(parts) != 4 {
			return nil, fmt.Errorf("reading jobs: an entry of %T", e)
		}
		id, _ := parts[0].(string)
		fields, _ := parts[1].([]any)
		over, _ := parts[2].(string)
		count, ok := parts[3].(int64)
		if !ok || count < 1 {
			return nil, fmt.Errorf("reading jobs: entry %s delivered %v times", id, parts[3])
		}
		d := delivery{XMessage: redis.XMessage{ID: id, Values: make(map[string]any, len(fields)/2)}, over: over, deliveries: count}
		for i := 0; i+1 < len(fields); i += 2 {
			name, _ := fields[i].(string)
			d.Values[name] = fields[i+1]
		}
		out = append(out, d)
	}
	return out, nil
}
