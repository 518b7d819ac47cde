package lab

import (
	"fmt"
	"os"
)

func init() {
	if os.Getenv("LAB_DEBUG") != "" {
		debugCalls = func(calls []call, ops []Op) {
			for _, c := range calls {
				fmt.Printf("call %s w%d fence %d exec %v at %s\n", c.Key, c.Worker, c.Fence, c.Executed, c.At.Format("05.000"))
			}
			for _, o := range ops {
				fmt.Printf("op %s c%d %s w%d %s at %s\n", o.Type, o.Client, o.Key, o.Worker, o.Result, o.At.Format("05.000"))
			}
		}
	}
}
