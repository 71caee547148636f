#!/usr/bin/env bash
# Generates the Java stubs for ../../proto (every file: tenure/v1/lease.proto, election.proto
# and tenure/v1/error_reason.proto, the ErrorReason enum) into
# target/generated-sources/protobuf/ with pinned protoc and protoc-gen-grpc-java
# (versions in pom.xml, fetched from Maven Central by the protobuf Maven plugin).
#
# Nothing generated is checked in: every Maven build runs this same step, so the
# Java stubs can never be out of date with the proto, and running this twice
# changes no tracked file.
set -euo pipefail
cd "$(dirname "$0")"
mvn -B -ntp -q generate-sources
echo "gen.sh: Java stubs generated into $(pwd)/target/generated-sources/protobuf" >&2
