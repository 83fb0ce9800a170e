module kmirror.local/pulumi-cli

go 1.26.6

require (
	github.com/pulumi/pulumi/pkg/v3 v3.274.1
	github.com/pulumi/pulumi/sdk/v3 v3.274.1
)

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
