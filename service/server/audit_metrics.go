package server

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-caller usage as metrics, from the audit lines: requests, commands
// and CPU seconds by owner (a uid, the token's callers, the queue), for
// the topCallers callers that used the most CPU; the rest together are
// "other". At most maxCallers owners are counted one by one (later ones
// go to "other" at once), so neither the labels nor the service's memory
// grow with the number of callers.
const (
	topCallers = 10
	maxCallers = 1024
	otherOwner = "other"
)

type usage struct{ requests, commands, cpu float64 }

type callerUsage struct {
	mu      sync.Mutex
	byOwner map[string]*usage
	other   usage
}

// add counts l for its caller's owner.
func (c *callerUsage) add(l *AuditLine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.byOwner[l.Caller.Owner]
	if u == nil {
		if len(c.byOwner) >= maxCallers {
			u = &c.other
		} else {
			u = &usage{}
			c.byOwner[l.Caller.Owner] = u
		}
	}
	if l.Endpoint != "background command" {
		u.requests++
	}
	for _, cmd := range l.Commands {
		if cmd.Status != "" {
			u.commands++
			u.cpu += cmd.CPUTime
		}
	}
}

// top is the topCallers owners by CPU, and the rest as "other".
func (c *callerUsage) top() (owners []string, uses []usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o := range c.byOwner {
		owners = append(owners, o)
	}
	sort.Slice(owners, func(i, j int) bool {
		a, b := c.byOwner[owners[i]], c.byOwner[owners[j]]
		return a.cpu > b.cpu || a.cpu == b.cpu && (a.requests > b.requests || a.requests == b.requests && owners[i] < owners[j])
	})
	other := c.other
	if len(owners) > topCallers {
		for _, o := range owners[topCallers:] {
			u := c.byOwner[o]
			other.requests, other.commands, other.cpu = other.requests+u.requests, other.commands+u.commands, other.cpu+u.cpu
		}
		owners = owners[:topCallers]
	}
	for _, o := range owners {
		uses = append(uses, *c.byOwner[o])
	}
	if other != (usage{}) {
		owners, uses = append(owners, otherOwner), append(uses, other)
	}
	return owners, uses
}

// usageCollector exports callerUsage. Gauges, not counters: a caller
// may move between its own label and "other" as the top changes.
type usageCollector struct {
	a                       *Auditor
	requests, commands, cpu *prometheus.Desc
}

func newUsageCollector(a *Auditor) *usageCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"caller"}, nil)
	}
	return &usageCollector{a: a,
		requests: d("isolate_caller_requests", "Requests audited since the service started, by caller (the 10 that used the most CPU; the rest as other)."),
		commands: d("isolate_caller_commands", "Commands that ran since the service started, by caller (as isolate_caller_requests)."),
		cpu:      d("isolate_caller_cpu_seconds", "CPU seconds of the commands that ran since the service started, by caller (as isolate_caller_requests)."),
	}
}

func (u *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- u.requests
	ch <- u.commands
	ch <- u.cpu
}

func (u *usageCollector) Collect(ch chan<- prometheus.Metric) {
	owners, uses := u.a.usage.top()
	for i, o := range owners {
		ch <- prometheus.MustNewConstMetric(u.requests, prometheus.GaugeValue, uses[i].requests, o)
		ch <- prometheus.MustNewConstMetric(u.commands, prometheus.GaugeValue, uses[i].commands, o)
		ch <- prometheus.MustNewConstMetric(u.cpu, prometheus.GaugeValue, uses[i].cpu, o)
	}
}
