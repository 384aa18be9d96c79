package framework

import (
	"encoding/json"
	"fmt"
)

// remarshal converts a decoded YAML document into a typed object.
func remarshal(in map[string]any, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("re-encoding manifest: %w", err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding manifest into %T: %w", out, err)
	}
	return nil
}
