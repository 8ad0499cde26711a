package hubtest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseFault reads a fault from a "key=value,key=value" spec (for
// `qpack hub-serve --fault`): kind (a FaultKind name: "trickle",
// "ignore-range", "corrupt", …), route ("info", "tree", "resolve", "cdn",
// …), method, path, seq, conn, skip, times, status, after (AfterBytes),
// delay (a Go duration), shift, rate (bytes/s), and for corrupt: op ("flip",
// "swap", "truncate"), at, with, len, mask, seed. Example:
// "kind=trickle,route=cdn,conn=3,rate=8192,times=-1".
func ParseFault(spec string) (Fault, error) {
	var f Fault
	kinds := map[string]FaultKind{}
	for k, n := range faultNames {
		kinds[n] = k
	}
	routes := map[string]Route{"": RouteAny, "any": RouteAny}
	for _, r := range []Route{RouteInfo, RouteTree, RoutePaths, RouteResolve, RouteCache, RouteCDN, RouteOther} {
		routes[string(r)] = r
	}
	ops := map[string]MutationOp{}
	for i, n := range mutationNames {
		ops[n] = MutationOp(i)
	}
	seenKind := false
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return f, fmt.Errorf("fault %q: %q is not key=value", spec, kv)
		}
		var err error
		num := func() int64 {
			n, e := strconv.ParseInt(v, 10, 64)
			if e != nil {
				err = fmt.Errorf("%s=%q is not an integer", k, v)
			}
			return n
		}
		switch k {
		case "kind":
			kind, ok := kinds[v]
			if !ok {
				return f, fmt.Errorf("fault %q: unknown kind %q", spec, v)
			}
			f.Kind, seenKind = kind, true
		case "route":
			r, ok := routes[v]
			if !ok {
				return f, fmt.Errorf("fault %q: unknown route %q", spec, v)
			}
			f.Route = r
		case "method":
			f.Method = strings.ToUpper(v)
		case "path":
			f.Path = v
		case "seq":
			f.Seq = int(num())
		case "conn":
			f.Conn = int(num())
		case "skip":
			f.Skip = int(num())
		case "times":
			f.Times = int(num())
		case "status":
			f.Status = int(num())
		case "after":
			f.AfterBytes = num()
		case "shift":
			f.Shift = num()
		case "rate":
			f.Rate = num()
		case "delay":
			d, e := time.ParseDuration(v)
			if e != nil {
				err = fmt.Errorf("delay=%q: %v", v, e)
			}
			f.Delay = d
		case "op":
			op, ok := ops[v]
			if !ok {
				return f, fmt.Errorf("fault %q: unknown op %q", spec, v)
			}
			f.Mutation.Op = op
		case "at":
			f.Mutation.At = num()
		case "with":
			f.Mutation.With = num()
		case "len":
			f.Mutation.Len = num()
		case "mask":
			f.Mutation.Mask = byte(num())
		case "seed":
			f.Mutation.Seed = uint64(num())
		default:
			return f, fmt.Errorf("fault %q: unknown key %q", spec, k)
		}
		if err != nil {
			return f, fmt.Errorf("fault %q: %v", spec, err)
		}
	}
	if !seenKind {
		return f, fmt.Errorf("fault %q: no kind=", spec)
	}
	if f.Kind == FaultHook {
		return f, fmt.Errorf("fault %q: kind hook needs code", spec)
	}
	return f, nil
}
