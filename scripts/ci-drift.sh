#!/usr/bin/env bash
# Nightly drift detection (.github/workflows/drift.yml), one stack per job: `pulumi preview
# --refresh --expect-no-changes` reads every resource of the stack from its cloud (the refresh) and
# fails when the code would change anything, i.e. when the estate drifted from what was deployed
# (a step cancelled by hand, an edited security group, a deleted ConfigMap) or main holds an
# undeployed change. Read-only: it runs with the preview role and changes nothing.
# Tested with a stand-in `pulumi`: tests/test_ci_drift.py.
#
# Environment:
#   STACK       the stack (a stacks/Pulumi.<stack>.yaml)
#   PULUMI_ORG  the Pulumi organisation
#   KMIRROR     the kmirror command (default .venv/bin/kmirror)
set -euo pipefail

KMIRROR="${KMIRROR:-.venv/bin/kmirror}"
: "${STACK:?STACK: the stack to check (stacks/Pulumi.<stack>.yaml)}"
: "${PULUMI_ORG:?PULUMI_ORG: the Pulumi organisation}"

region="$("$KMIRROR" stack-info "$STACK" region)"
code=0
AWS_REGION="$region" AWS_DEFAULT_REGION="$region" \
  pulumi preview --refresh --expect-no-changes --diff --stack "$PULUMI_ORG/$STACK" || code=$?
if [ "$code" -ne 0 ]; then
  echo "::error::stack $STACK: drift (pulumi preview --refresh --expect-no-changes exited $code). The diff above" \
    "shows what differs from the code; either an undeployed change on main (deploy it) or a change made outside" \
    "Pulumi: undo it, or run \`pulumi refresh --stack $PULUMI_ORG/$STACK\` then \`pulumi up\` to put the code's state back" >&2
  exit "$code"
fi
echo "stack $STACK: no drift"
