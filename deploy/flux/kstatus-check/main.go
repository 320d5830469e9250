// kstatus-check prints what Flux's health checks (kstatus, the library Flux
// uses) compute for Kubernetes objects: Current, InProgress, Failed, ...
//
//	kubectl get clientquotas -A -o json | go run ./deploy/flux/kstatus-check
//
// It reads one object, a List, or a JSON array of objects on stdin and writes
// a JSON array of {"name", "status", "message"}. tests/unit/test_argocd_health.py
// runs it on the same sample resources as the Argo CD health check.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
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

func main() {
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
		res, err := status.Compute(u)
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
