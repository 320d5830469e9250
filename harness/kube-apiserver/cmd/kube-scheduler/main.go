// Command kube-scheduler is the upstream kube-scheduler
// (k8s.io/kubernetes cmd/kube-scheduler/app), built from the same module and
// version as the harness's kube-apiserver, for harness/node.py.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as upstream
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
