// Command pulumi-codegen-nodejs writes a package's Node.js SDK from its schema with Pulumi's own
// Node.js code generator (pkg/v3/codegen/nodejs.GeneratePackage), the generator that
// `pulumi package gen-sdk --language nodejs` reaches through pulumi-language-nodejs's
// GeneratePackage. That host is not on the Go module proxy (403), so this stands in for it:
//
//	pulumi package get-schema ./components > schema.json   # the real CLI, the real plugin
//	pulumi-codegen-nodejs schema.json OUT_DIR
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/pkg/v3/codegen/nodejs"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: pulumi-codegen-nodejs SCHEMA.json OUT_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-codegen-nodejs:", err)
		os.Exit(1)
	}
}

func run(schemaPath, out string) error {
	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		return err
	}
	var spec schema.PackageSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("%s: %w", schemaPath, err)
	}
	// no loader for other packages: the component schema refers to no other package's types
	pkg, diags, err := schema.BindSpec(spec, schema.NewNullLoader(), schema.ValidationOptions{})
	if err != nil {
		return err
	}
	if diags.HasErrors() {
		return diags
	}
	files, err := nodejs.GeneratePackage("pulumi-codegen-nodejs", pkg, nil, nil, false, nil)
	if err != nil {
		return err
	}
	for name, body := range files {
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			return err
		}
	}
	return nil
}
