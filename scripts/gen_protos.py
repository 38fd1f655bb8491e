"""Regenerate the client code for proto/ (or check it is current): Python into
clients/protos/src (the effectgate-protos distribution, which the gateway and the Python client
both depend on), TypeScript into clients/typescript/src/gen.

Usage: python scripts/gen_protos.py [--check]

The generated code is checked in so that each client installs without a code generator;
`--check` regenerates into a temporary folder and fails on any drift. TypeScript uses the npm
`@bufbuild/buf` CLI with the local `protoc-gen-es` plugin from clients/typescript/node_modules
(`npm ci` there when missing); without npm the TypeScript half is skipped loudly, except in CI.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "clients" / "protos" / "src"
GENERATED_PACKAGES = ("effectgate/v1", "effectgate/tools/v1")
TS_DIR = ROOT / "clients" / "typescript"
TS_GEN = Path("src") / "gen"


def generate(out: Path) -> None:
    # protoc finds the mypy-protobuf plugins on PATH; they live beside this interpreter.
    bin_dir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for package in GENERATED_PACKAGES:
        marker = out / package / "py.typed"
        marker.touch()
        (out / package / "__init__.py").touch()
    # effectgate/ and effectgate/tools/ stay namespace packages (PEP 420): the gateway
    # distribution adds effectgate.gateway and effectgate.adapters beside them, the client
    # distribution effectgate.client.


def typescript_ready() -> bool:
    """True when buf and protoc-gen-es are installed (running `npm ci` if npm is here)."""
    if (TS_DIR / "node_modules" / ".bin" / "buf").exists():
        return True
    if shutil.which("npm") is None:
        if os.environ.get("CI", "").lower() == "true":
            raise SystemExit("TypeScript generation: npm is required in CI")
        print("TypeScript generation: SKIPPED (npm not found; apt-get install npm to enable it)", file=sys.stderr)
        return False
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=TS_DIR, check=True)
    # What scripts/test_typescript.sh compares to skip a second `npm ci` of the same lockfile.
    shutil.copyfile(TS_DIR / "package-lock.json", TS_DIR / "node_modules" / ".ci-package-lock.json")
    return True


def generate_ts(out: Path) -> None:
    """`buf generate` (clients/typescript/buf.gen.yaml) with `out` as the output base."""
    bin_dir = TS_DIR / "node_modules" / ".bin"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run([str(bin_dir / "buf"), "generate", "-o", str(out)], cwd=TS_DIR, env=env, check=True)


def ts_files(base: Path) -> set[str]:
    return {str(p.relative_to(base)) for p in (base / TS_GEN).rglob("*") if p.is_file()}


def generated_files(base: Path) -> set[str]:
    return {
        str(p.relative_to(base)) for package in GENERATED_PACKAGES for p in (base / package).glob("*") if p.is_file()
    }


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        want, have = generated_files(fresh), generated_files(OUT_DIR)
        stale = sorted(want ^ have)
        stale += sorted(f for f in want & have if not filecmp.cmp(fresh / f, OUT_DIR / f, shallow=False))
        if typescript_ready():
            generate_ts(fresh / "ts")
            want, have = ts_files(fresh / "ts"), ts_files(TS_DIR)
            stale += [f"clients/typescript/{f}" for f in sorted(want ^ have)]
            stale += [
                f"clients/typescript/{f}"
                for f in sorted(want & have)
                if not filecmp.cmp(fresh / "ts" / f, TS_DIR / f, shallow=False)
            ]
        if stale:
            print("generated code is stale; run `make proto`:", *stale, sep="\n  ")
            return 1
    print("generated code is current")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if checked-in code is stale")
    if parser.parse_args().check:
        return check()
    for package in GENERATED_PACKAGES:
        shutil.rmtree(OUT_DIR / package, ignore_errors=True)
    generate(OUT_DIR)
    print(f"generated {len(generated_files(OUT_DIR))} files under {OUT_DIR.relative_to(ROOT)}")
    if typescript_ready():
        generate_ts(TS_DIR)  # buf.gen.yaml has `clean: true`: stale files under src/gen go
        print(f"generated {len(ts_files(TS_DIR))} files under {(TS_DIR / TS_GEN).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
