package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// toolDef is one entry of a chat request's tools (OpenAI function
// calling): only functions exist.
type toolDef struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

// toolCall is the assistant's call as the chat API returns it.
type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolCallFunc `json:"function"`
}

type toolCallFunc struct {
	Name string `json:"name"`
	// Arguments is a JSON object encoded as a string, as the API has it.
	Arguments string `json:"arguments"`
}

// pickToolCall decides engine-sim's answer to a chat request with tools,
// deterministically, so a harness run against it is reproducible:
//
//   - tool_choice "none": no call (a text answer).
//   - tool_choice {"type":"function","function":{"name":N}}: a call of N
//     (an unknown N is a 400, as on vLLM).
//   - "required": a call, every turn.
//   - "auto" or absent: a call unless the last message is a tool result,
//     which is answered in text, so a tool loop ends.
//
// The function called (when not named) is the first whose name, with
// underscores read as spaces, appears in the last user message, else the
// first tool. Its arguments fill every required parameter from the JSON
// schema: the first enum value, "sim" for strings, 1 for numbers, true,
// [] and {}.
func pickToolCall(tools []toolDef, choice json.RawMessage, msgs []chatMessage, question string) (*toolCall, error) {
	mode, named := "auto", ""
	if len(choice) > 0 && string(choice) != "null" {
		var s string
		var obj struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(choice, &s) == nil:
			mode = s
		case json.Unmarshal(choice, &obj) == nil && obj.Function.Name != "":
			mode, named = "named", obj.Function.Name
		default:
			return nil, fmt.Errorf("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
		}
	}
	var pick *toolDef
	switch mode {
	case "none":
		return nil, nil
	case "auto":
		if len(msgs) > 0 && msgs[len(msgs)-1].Role == "tool" {
			return nil, nil
		}
	case "required":
	case "named":
		for i := range tools {
			if tools[i].Function.Name == named {
				pick = &tools[i]
			}
		}
		if pick == nil {
			return nil, fmt.Errorf("tool_choice names function %q, which is not in tools", named)
		}
	default:
		return nil, fmt.Errorf("tool_choice %q is not none, auto or required", mode)
	}
	if pick == nil {
		q := strings.ToLower(question)
		for i := range tools {
			n := strings.ToLower(tools[i].Function.Name)
			if n != "" && (strings.Contains(q, n) || strings.Contains(q, strings.ReplaceAll(n, "_", " "))) {
				pick = &tools[i]
				break
			}
		}
		if pick == nil {
			pick = &tools[0]
		}
	}
	args, err := json.Marshal(argsFor(pick.Function.Parameters))
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", pick.Function.Name, question, len(msgs))
	return &toolCall{ID: fmt.Sprintf("call_sim_%016x", h.Sum64()), Type: "function",
		Function: toolCallFunc{Name: pick.Function.Name, Arguments: string(args)}}, nil
}

// argsFor fills a JSON schema object's required properties.
func argsFor(schema json.RawMessage) map[string]any {
	var s struct {
		Properties map[string]struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	out := map[string]any{}
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil {
		return out
	}
	req := append([]string(nil), s.Required...)
	sort.Strings(req)
	for _, k := range req {
		p, ok := s.Properties[k]
		switch {
		case !ok:
			out[k] = "sim"
		case len(p.Enum) > 0:
			out[k] = p.Enum[0]
		default:
			t, _ := p.Type.(string)
			if ts, ok := p.Type.([]any); ok && len(ts) > 0 {
				t, _ = ts[0].(string)
			}
			switch t {
			case "integer", "number":
				out[k] = 1
			case "boolean":
				out[k] = true
			case "array":
				out[k] = []any{}
			case "object":
				out[k] = map[string]any{}
			default:
				out[k] = "sim"
			}
		}
	}
	return out
}
