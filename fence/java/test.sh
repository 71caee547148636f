#!/usr/bin/env bash
# Builds the Java fence verifier (dev.tenure:tenure-fence) and runs its JUnit 5
# tests through Maven Surefire: every case of the shared vectors
# (../vectors/v1.json), the verifier's strictness, and FenceFilter in a real
# servlet container (embedded Tomcat on 127.0.0.1, a free port) over real HTTP.
# No Tenure server is needed. Dependencies are pinned in pom.xml and come from
# Maven Central into the default ~/.m2 (nothing is fetched when already there).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

# The machine image has OpenJDK 17 and Maven; install them from Debian's
# packages only where they are missing.
if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
  echo "test.sh: installing maven and openjdk-17-jdk-headless (apt)" >&2
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven openjdk-17-jdk-headless
fi

cd "$here"
# Reports of an earlier run would be counted below.
rm -rf target/surefire-reports
# -q: only failures are printed (then Maven exits non-zero); -ntp keeps
# download progress out of the log.
mvn -q -B -ntp -Dstyle.color=never test

# The count, from Surefire's reports; a skipped test fails the run.
tests=0 failures=0 errors=0 skipped=0
for report in target/surefire-reports/TEST-*.xml; do
  suite=$(grep -o -m 1 '<testsuite [^>]*>' "$report")
  for field in tests failures errors skipped; do
    value=$(printf '%s\n' "$suite" | sed -n "s/.* $field=\"\([0-9]*\)\".*/\1/p")
    eval "$field=\$(( $field + ${value:-0} ))"
  done
done
echo "fence/java: $tests tests, $failures failures, $errors errors, $skipped skipped"
if [ "$skipped" -ne 0 ] || [ "$tests" -eq 0 ]; then
  echo "test.sh: tests were skipped or none ran" >&2
  exit 1
fi
