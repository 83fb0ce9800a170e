#!/usr/bin/env bash
# The main branch's deploy (.github/workflows/preview.yml, job `up`), one stack at a time in the
# order `kmirror diff --format stack-order` gives (a stack losing a moved flow before the one
# gaining it). Tested with stand-in `aws`, `curl` and `pulumi` commands: tests/test_ci_deploy.py.
#
# Environment:
#   ORDER              JSON list of stacks (kmirror diff --format stack-order)
#   IMAGE              the pushed app image by digest (REPO@sha256:...), set on EKS stacks
#   PULUMI_ORG         the Pulumi organisation
#   AWS_DEPLOY_ROLES   JSON object: stack -> the IAM role that stack deploys with (one per
#                      datacenter/region: a deploy of `west` cannot touch `east`'s account or region)
#   ACTIONS_ID_TOKEN_REQUEST_URL/_TOKEN  GitHub's OIDC token endpoint (permissions: id-token: write)
#   KMIRROR            the kmirror command (default .venv/bin/kmirror)
# Each stack's role is assumed with a fresh OIDC token (no long-lived keys) just before its
# `pulumi refresh` and `up` (refresh first: drift is taken into the state before the plan).
# The image digest set on an EKS stack is written to its stacks/Pulumi.<stack>.yaml, which the
# workflow then commits, so git says which image each stack runs.
set -euo pipefail

KMIRROR="${KMIRROR:-.venv/bin/kmirror}"
: "${ORDER:?ORDER: the stack order (JSON list) from kmirror diff --format stack-order}"
: "${IMAGE:?IMAGE: the app image by digest (REPO@sha256:...)}"
: "${PULUMI_ORG:?PULUMI_ORG: the Pulumi organisation}"
: "${AWS_DEPLOY_ROLES:?AWS_DEPLOY_ROLES: JSON object mapping each stack to its deploy role ARN}"

if ! [[ "$IMAGE" =~ @sha256:[0-9a-f]{64}$ ]]; then
  echo "IMAGE is '$IMAGE': expected REPO@sha256:<64 hex digits> (the image job's digest output)" >&2
  exit 2
fi

stacks="$(jq -r '.[]' <<<"$ORDER")"
# Every stack's role first: a missing one stops the deploy before any stack changes.
missing=""
for stack in $stacks; do
  [ "$stack" = local ] && continue
  role="$(jq -r --arg s "$stack" '.[$s] // empty' <<<"$AWS_DEPLOY_ROLES")"
  [ -z "$role" ] && missing="$missing $stack"
done
if [ -n "$missing" ]; then
  echo "AWS_DEPLOY_ROLES has no role for:$missing; add {\"<stack>\": \"arn:aws:iam::<account>:role/<deploy role>\"} to the repository variable (docs/ci-preview.md)" >&2
  exit 2
fi

assume_role() {  # $1 stack, $2 role ARN: that role's credentials in the environment
  local token creds
  token="$(curl -sSf -H "Authorization: bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN" \
    "$ACTIONS_ID_TOKEN_REQUEST_URL&audience=sts.amazonaws.com" | jq -r .value)"
  creds="$(aws sts assume-role-with-web-identity --role-arn "$2" --role-session-name "kmirror-deploy-$1" \
    --web-identity-token "$token" --duration-seconds 3600 --query Credentials --output json)"
  AWS_ACCESS_KEY_ID="$(jq -r .AccessKeyId <<<"$creds")"
  AWS_SECRET_ACCESS_KEY="$(jq -r .SecretAccessKey <<<"$creds")"
  AWS_SESSION_TOKEN="$(jq -r .SessionToken <<<"$creds")"
  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
}

for stack in $stacks; do
  [ "$stack" = local ] && continue
  region="$("$KMIRROR" stack-info "$stack" region)"
  role="$(jq -r --arg s "$stack" '.[$s]' <<<"$AWS_DEPLOY_ROLES")"
  assume_role "$stack" "$role"
  if [ "$("$KMIRROR" stack-info "$stack" platform)" = eks ]; then
    pulumi config set --path kafka-mirror:spark.image "$IMAGE" --stack "$PULUMI_ORG/$stack"
  fi
  # The state first takes in what changed outside Pulumi (a step cancelled by hand, an edited
  # security group), so `up` plans against the real estate, not the last deploy's memory of it.
  echo "::group::pulumi refresh $stack ($region, $role)"
  AWS_REGION="$region" AWS_DEFAULT_REGION="$region" \
    pulumi refresh --yes --skip-preview --diff --stack "$PULUMI_ORG/$stack"
  echo "::endgroup::"
  echo "::group::pulumi up $stack ($region, $role)"
  AWS_REGION="$region" AWS_DEFAULT_REGION="$region" \
    pulumi up --yes --diff --stack "$PULUMI_ORG/$stack" --policy-pack policy
  echo "::endgroup::"
done
