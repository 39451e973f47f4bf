package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// Fan-in flags of kv-events and kv-index (issue 36): llm-d's topology, one
// bound endpoint every engine connects to, each topic its own engine.

// fanInUsage is --fan-in's help.
const fanInUsage = "endpoint to bind for any number of engines that connect to it, each topic (llm-d's kv@{host}@{model}) its own engine (kvevents.Source.FanIn; repeatable)"

// addFanInFlags registers --fan-in, --fan-in-replay, --fan-in-any-address
// and --engine-ttl on fs, into f.
func addFanInFlags(fs *flag.FlagSet, f *kvSourcesFlag) {
	fs.Var(kvFanInFlag{f: f}, "fan-in", fanInUsage)
	fs.Var(kvFanInReplayFlag{f: f}, "fan-in-replay", "replay endpoint `template` of the --fan-in before it: {host} is replaced by each engine's topic's host part, e.g. tcp://{host}:5558 (default: none, a gap is a lost range)")
	fs.BoolVar(&f.fanInAnyAddress, "fan-in-any-address", false, "accept a --fan-in topic kv@IP@model from any address (by default only from IP itself; set behind proxies and meshes that rewrite addresses)")
	fs.DurationVar(&f.engineTTL, "engine-ttl", 10*time.Minute, "retire an engine (its entries dropped) once its connection has been gone this long; an idle connected engine is never retired; 0 or negative: never")
}

// applyFanIn sets the Config fields of the fan-in flags.
func (f *kvSourcesFlag) applyFanIn(c *kvevents.Config) {
	c.FanInAnyAddress = f.fanInAnyAddress
	c.EngineTTL = f.engineTTL
	if c.EngineTTL == 0 {
		c.EngineTTL = -1 // --engine-ttl 0: never, as a flag reads
	}
}

type kvFanInFlag struct{ f *kvSourcesFlag }

func (v kvFanInFlag) String() string { return "" }

func (v kvFanInFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty endpoint")
	}
	v.f.list = append(v.f.list, kvevents.Source{Name: s, Live: s, FanIn: true})
	return nil
}

type kvFanInReplayFlag struct{ f *kvSourcesFlag }

func (v kvFanInReplayFlag) String() string { return "" }

func (v kvFanInReplayFlag) Set(s string) error {
	if len(v.f.list) == 0 || !v.f.list[len(v.f.list)-1].FanIn {
		return errors.New("--fan-in-replay must follow the --fan-in it belongs to")
	}
	if !strings.Contains(s, "{host}") {
		return fmt.Errorf("template %q has no {host}", s)
	}
	last := &v.f.list[len(v.f.list)-1]
	if last.ReplayTemplate != "" {
		return fmt.Errorf("--fan-in %s already has --fan-in-replay %s", last.Live, last.ReplayTemplate)
	}
	last.ReplayTemplate = s
	return nil
}
