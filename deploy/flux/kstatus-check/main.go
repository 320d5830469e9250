// kstatus-check prints what Flux's health checks compute for Kubernetes
// objects: Current, InProgress, Failed, ... It uses the libraries
// kustomize-controller v1.9.6 uses: Flux's kstatus (github.com/fluxcd/cli-utils)
// and, with -exprs, Flux's evaluator of a Kustomization's healthCheckExprs
// (github.com/fluxcd/pkg/runtime/cel).
//
//	kubectl get clientquotas -A -o json | go run ./deploy/flux/kstatus-check
//	kubectl get clientquotas -A -o json | go run ./deploy/flux/kstatus-check -exprs deploy/flux/health-check-exprs.yaml
//
// It reads one object, a List, or a JSON array of objects on stdin and writes
// a JSON array of {"name", "status", "message"}. An object whose expression
// cannot be evaluated gets the status Unknown and the error as its message, as
// Flux's status reader reports it. tests/unit/test_argocd_health.py runs it on
// the same resources as the Argo CD health check.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

type result struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func items(doc interface{}) []map[string]interface{} {
	var out []map[string]interface{}
	switch v := doc.(type) {
	case []interface{}:
		for _, item := range v {
			if m, ok := item.(map[string]interface{}); ok {
				out = append(out, m)
			}
		}
	case map[string]interface{}:
		if list, ok := v["items"].([]interface{}); ok {
			return items(list)
		}
		out = append(out, v)
	}
	return out
}

// evaluators reads a healthCheckExprs list (as under a Kustomization's spec)
// into one evaluator per GroupKind, as kustomize-controller builds them.
func evaluators(path string) (map[schema.GroupKind]*cel.StatusEvaluator, error) {
	out := map[schema.GroupKind]*cel.StatusEvaluator{}
	if path == "" {
		return out, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var checks []kustomize.CustomHealthCheck
	if err := yaml.UnmarshalStrict(data, &checks); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, hc := range checks {
		gk := schema.FromAPIVersionAndKind(hc.APIVersion, hc.Kind).GroupKind()
		if _, ok := out[gk]; ok {
			return nil, fmt.Errorf("%s: duplicate health check for %s at [%d]", path, gk, i)
		}
		e, err := cel.NewStatusEvaluator(&hc.HealthCheckExpressions)
		if err != nil {
			return nil, fmt.Errorf("%s [%d]: %w", path, i, err)
		}
		out[gk] = e
	}
	return out, nil
}

func main() {
	exprs := flag.String("exprs", "", "a file of healthCheckExprs (YAML list) to evaluate instead of kstatus for their kinds")
	flag.Parse()
	evals, err := evaluators(*exprs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus-check:", err)
		os.Exit(2)
	}
	data, err := io.ReadAll(os.Stdin)
	var doc interface{}
	if err == nil {
		// Kubernetes' decoder: whole numbers become int64, as unstructured objects expect.
		err = utiljson.Unmarshal(data, &doc)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus-check: reading JSON from stdin:", err)
		os.Exit(2)
	}
	results := []result{}
	for _, obj := range items(doc) {
		u := &unstructured.Unstructured{Object: obj}
		var res *status.Result
		if e, ok := evals[u.GroupVersionKind().GroupKind()]; ok {
			res, err = e.Evaluate(context.Background(), u)
			if err != nil {
				res, err = &status.Result{Status: status.UnknownStatus, Message: err.Error()}, nil
			}
		} else {
			res, err = status.Compute(u)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus-check: %s/%s: %v\n", u.GetNamespace(), u.GetName(), err)
			os.Exit(1)
		}
		results = append(results, result{Name: u.GetName(), Status: res.Status.String(), Message: res.Message})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(results); err != nil {
		os.Exit(1)
	}
}
