package gpustack

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStepsJSON: a build-time plan's steps survive their JSON form, which a
// generator writes into its tree, and ForKernels binds every action to
// the image's kernels; only the templates that their action expands (the
// hold's, the driver choice's modules package) keep the placeholder.
func TestStepsJSON(t *testing.T) {
	for _, tg := range []Target{
		{Distro: "debian", Version: "13", Codename: "trixie", Arch: "amd64", KernelsAtBuildTime: true},
		{Distro: "ubuntu", Version: "24.04", Codename: "noble", Arch: "amd64", KernelsAtBuildTime: true},
	} {
		t.Run(tg.Distro, func(t *testing.T) {
			p, err := NewPlan(resolve(t, map[string]string{"ENABLE_NVIDIA_GPU": "yes", "LOCAL_REPO_CLOSURE": "none"}), tg)
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(p.Steps)
			if err != nil {
				t.Fatal(err)
			}
			var back []Step
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			again, err := json.Marshal(back)
			if err != nil {
				t.Fatal(err)
			}
			if string(again) != string(data) {
				t.Fatalf("steps changed through JSON:\n%s\n%s", data, again)
			}
			if (&Plan{Steps: back}).Text() != (&Plan{Steps: p.Steps}).Text() {
				t.Error("the steps read back describe themselves differently")
			}
			ks := []string{"6.1.0-1-amd64", "6.1.0-2-amd64"}
			bound, err := ForKernels(back, ks)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range bound {
				for _, a := range s.Actions {
					text, _ := json.Marshal(a)
					switch a := a.(type) {
					case HoldPackages:
						continue // its script expands the templates
					case ChooseDriver:
						// Modules is a template Packages expands.
						a.Modules = ""
						text, _ = json.Marshal(a)
					}
					if strings.Contains(string(text), KernelPlaceholder) {
						t.Errorf("step %s: %s still holds %s: %s", s.ID, ActionName(a), KernelPlaceholder, text)
					}
					if strings.Contains(s.Title, "the image's kernels") {
						t.Errorf("step %s: title %q not bound", s.ID, s.Title)
					}
				}
			}
			// The plan it came from is left as it was.
			if after, _ := json.Marshal(back); string(after) != string(data) {
				t.Error("ForKernels changed the steps it was given")
			}
		})
	}
}

func TestStepsJSONUnknownAction(t *testing.T) {
	var s Step
	err := json.Unmarshal([]byte(`{"ID":"x","Title":"X","Actions":[{"Action":"FormatDisk"}]}`), &s)
	if err == nil || !strings.Contains(err.Error(), `unknown plan action "FormatDisk"`) {
		t.Fatalf("error %v, want the unknown action named", err)
	}
}
