package gpustack

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// actionTypes are the plan's actions by name, for the steps' JSON form: a
// generator writes the steps into its tree, and the one executor reads
// them back at build time (docs/mkosi.md, "Scripts").
var actionTypes = map[string]reflect.Type{}

func init() {
	for _, a := range []Action{
		AptComponents{}, AptSource{}, AptPin{}, AptUpdate{}, Install{}, WriteFile{},
		EnableUnits{}, BuildModules{}, CheckModules{}, SignModules{}, HoldPackages{},
		CheckDriverVersion{}, UpdateInitramfs{}, DeferInitramfs{}, ToolkitConfig{},
		BakeRepo{}, VerifyRepo{}, VerifyExecutable{}, ChooseDriver{}, IfDriverSource{},
		CheckKernelSignatures{},
	} {
		t := reflect.TypeOf(a)
		actionTypes[t.Name()] = t
	}
}

// ActionName is the action's type name, as the steps' JSON form has it.
func ActionName(a Action) string { return reflect.TypeOf(a).Name() }

// taggedAction is one action in JSON: its type name and its fields.
type taggedAction struct {
	Action string
	With   json.RawMessage `json:",omitempty"`
}

func marshalActions(as []Action) ([]taggedAction, error) {
	out := make([]taggedAction, len(as))
	for i, a := range as {
		name := ActionName(a)
		if actionTypes[name] == nil {
			return nil, fmt.Errorf("plan action %T has no JSON name", a)
		}
		data, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("plan action %s: %w", name, err)
		}
		out[i] = taggedAction{Action: name, With: data}
	}
	return out, nil
}

func unmarshalActions(ts []taggedAction) ([]Action, error) {
	out := make([]Action, len(ts))
	for i, t := range ts {
		typ := actionTypes[t.Action]
		if typ == nil {
			return nil, fmt.Errorf("unknown plan action %q", t.Action)
		}
		v := reflect.New(typ)
		if len(t.With) > 0 {
			if err := json.Unmarshal(t.With, v.Interface()); err != nil {
				return nil, fmt.Errorf("plan action %s: %w", t.Action, err)
			}
		}
		out[i] = v.Elem().Interface().(Action)
	}
	return out, nil
}

type stepJSON struct {
	ID, Title string
	Actions   []taggedAction
}

// MarshalJSON writes the step with each action tagged by its type.
func (s Step) MarshalJSON() ([]byte, error) {
	as, err := marshalActions(s.Actions)
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", s.ID, err)
	}
	return json.Marshal(stepJSON{ID: s.ID, Title: s.Title, Actions: as})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *Step) UnmarshalJSON(data []byte) error {
	var j stepJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	as, err := unmarshalActions(j.Actions)
	if err != nil {
		return fmt.Errorf("step %s: %w", j.ID, err)
	}
	*s = Step{ID: j.ID, Title: j.Title, Actions: as}
	return nil
}

type ifDriverSourceJSON struct {
	Source  string
	Actions []taggedAction
}

// MarshalJSON tags the nested actions as a step's are.
func (a IfDriverSource) MarshalJSON() ([]byte, error) {
	as, err := marshalActions(a.Actions)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ifDriverSourceJSON{Source: a.Source, Actions: as})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (a *IfDriverSource) UnmarshalJSON(data []byte) error {
	var j ifDriverSourceJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	as, err := unmarshalActions(j.Actions)
	if err != nil {
		return err
	}
	*a = IfDriverSource{Source: j.Source, Actions: as}
	return nil
}

// Checks reports whether every action of the step only checks the image,
// so that a back end may run the step last, once the image is complete.
// CheckKernelSignatures is not one: it records the signatures the bake
// reads.
func (s Step) Checks() bool {
	for _, a := range s.Actions {
		switch a := a.(type) {
		case CheckModules, CheckDriverVersion, VerifyRepo, VerifyExecutable:
		case SignModules:
			if !a.Verify {
				return false
			}
		case IfDriverSource:
			if !(Step{Actions: a.Actions}).Checks() {
				return false
			}
		default:
			return false
		}
	}
	return len(s.Actions) > 0
}

// ForKernels returns the steps of a plan made for build-time kernels
// (KernelPlaceholder) bound to the kernels the image has: every Kernels
// field that holds the placeholder takes them, and every package template
// of a Packages field is expanded for each. The steps are copied; s is
// left as it was.
func ForKernels(s []Step, kernels []string) ([]Step, error) {
	if len(kernels) == 0 {
		return nil, fmt.Errorf("no kernel to bind the plan to")
	}
	out := make([]Step, len(s))
	for i, st := range s {
		as, err := bindActions(st.Actions, kernels)
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", st.ID, err)
		}
		out[i] = Step{ID: st.ID, Title: strings.ReplaceAll(st.Title, kernelRange([]string{KernelPlaceholder}), kernelRange(kernels)), Actions: as}
	}
	return out, nil
}

func bindActions(as []Action, kernels []string) ([]Action, error) {
	out := make([]Action, len(as))
	for i, a := range as {
		if x, ok := a.(IfDriverSource); ok {
			inner, err := bindActions(x.Actions, kernels)
			if err != nil {
				return nil, err
			}
			out[i] = IfDriverSource{Source: x.Source, Actions: inner}
			continue
		}
		// A copy through JSON: no slice of the plan is shared.
		v := reflect.New(reflect.TypeOf(a)).Elem()
		data, err := json.Marshal(a)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, v.Addr().Interface()); err != nil {
			return nil, err
		}
		if f := v.FieldByName("Kernels"); f.IsValid() && slices.Equal(f.Interface().([]string), []string{KernelPlaceholder}) {
			f.Set(reflect.ValueOf(slices.Clone(kernels)))
		}
		// HoldPackages' script expands its own templates per kernel.
		if _, hold := a.(HoldPackages); !hold {
			if f := v.FieldByName("Packages"); f.IsValid() && f.Type() == reflect.TypeOf([]string(nil)) {
				f.Set(reflect.ValueOf(expand(f.Interface().([]string), kernels)))
			}
		}
		out[i] = v.Interface().(Action)
	}
	return out, nil
}
