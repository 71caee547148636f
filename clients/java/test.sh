#!/usr/bin/env bash
# Builds the Java client (stubs generated from ../../proto at build time) and runs
# its JUnit 5 tests through Maven Surefire against real Tenure servers that the
# tests start themselves (tenure serve + its own nats-server, on 127.0.0.1).
#
# Assumes scripts/tools.sh and `cargo build` ran at the repository root, so that
# target/debug/tenure and .tools/bin/nats-server exist; TENURE_BIN and
# NATS_SERVER override those paths. Dependencies are pinned in pom.xml and come
# from Maven Central into the default ~/.m2 (fast when already there).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

absolute() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$PWD/$1" ;;
  esac
}
TENURE_BIN=$(absolute "${TENURE_BIN:-$root/target/debug/tenure}")
NATS_SERVER=$(absolute "${NATS_SERVER:-$root/.tools/bin/nats-server}")
export TENURE_BIN NATS_SERVER
for bin in "$TENURE_BIN" "$NATS_SERVER"; do
  if [ ! -x "$bin" ]; then
    echo "test.sh: $bin is missing: run scripts/tools.sh and cargo build at $root" >&2
    exit 1
  fi
done

# The machine image has OpenJDK 17 and Maven; install them from Debian's
# packages only where they are missing.
if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
  echo "test.sh: installing maven and openjdk-17-jdk-headless (apt)" >&2
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven openjdk-17-jdk-headless
fi

cd "$here"
# The documented install: builds, runs the unit tests (no server needed: the
# tests tagged "integration" are left out) and installs into ~/.m2.
# -ntp keeps download progress out of the log; Surefire's summary stays visible.
mvn -B -ntp -Dstyle.color=never install
# The tests against real Tenure servers.
mvn -B -ntp -Dstyle.color=never -Pintegration test

# A scratch Maven project outside the repository that depends on the installed
# artifact compiles and runs (it reports an unreachable server as a
# TenureException naming the target and the cause).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/src/main/java/app"
cat > "$scratch/pom.xml" <<'POM'
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>app</groupId>
  <artifactId>scratch</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.source>17</maven.compiler.source>
    <maven.compiler.target>17</maven.compiler.target>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>dev.tenure</groupId>
      <artifactId>tenure-client</artifactId>
      <version>0.1.0-SNAPSHOT</version>
    </dependency>
  </dependencies>
</project>
POM
cat > "$scratch/src/main/java/app/Main.java" <<'JAVA'
package app;

import dev.tenure.client.LeaseClient;
import dev.tenure.client.TenureException;
import java.time.Duration;

public class Main {
  public static void main(String[] args) {
    try (LeaseClient client = LeaseClient.connect("127.0.0.1:1")) {
      client.acquire("scratch.check", "me", Duration.ofSeconds(5));
      throw new AssertionError("acquire from a closed port succeeded");
    } catch (TenureException e) {
      if (!e.getMessage().startsWith("tenure at 127.0.0.1:1: Acquire: UNAVAILABLE")) {
        throw new AssertionError("unexpected message: " + e.getMessage());
      }
      System.out.println("install: scratch project ok: " + e.getMessage());
    }
  }
}
JAVA
(cd "$scratch" && mvn -B -ntp -q -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=cp.txt \
  && java -cp "target/classes:$(cat cp.txt)" app.Main)
