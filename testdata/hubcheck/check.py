#!/usr/bin/env python3
"""Fidelity checks between qpack and the official huggingface_hub client.

Called by run.sh, one step per process (HF_HUB_OFFLINE and friends are read
at import time). Every step prints "PASS <name>" or "FAIL <name>: <why>" and
exits 0 / 1. Only the standard library and huggingface_hub are used.
"""
import hashlib
import json
import os
import subprocess
import sys
import traceback


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def source_files(src):
    """path -> sha256 of every file of the served repository directory."""
    out = {}
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != ".git"]
        for n in files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, src).replace(os.sep, "/")] = sha256_file(p)
    return out


def tree_files(d, skip_cache=False):
    out = {}
    for root, dirs, files in os.walk(d):
        if skip_cache:
            dirs[:] = [x for x in dirs if not (root == d and x == ".cache")]
        for n in files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, d).replace(os.sep, "/")] = sha256_file(p)
    return out


def same(name, got, want):
    if got != want:
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        differ = sorted(k for k in set(got) & set(want) if got[k] != want[k])
        raise AssertionError(f"{name}: missing {missing}, extra {extra}, different {differ}")


def hf_cli(*args):
    """Runs the official CLI (`hf`), returning (rc, stdout, stderr)."""
    exe = os.environ.get("HF_CLI") or "hf"
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
    print(f"$ {exe} {' '.join(args)}\n[rc={p.returncode}]\n{p.stdout}{p.stderr}", file=sys.stderr)
    return p.returncode, p.stdout, p.stderr


def printed_path(out):
    """The path `hf download` printed: a "path: ..." line (1.3x) or the last line."""
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    for l in lines:
        if l.startswith("path:"):
            return l[len("path:"):].strip()
    for l in reversed(lines):
        if os.path.exists(l):
            return l
    raise AssertionError(f"no path in the output of hf download: {out!r}")


def filtered(files, include=None, exclude=None):
    from huggingface_hub.utils import filter_repo_objects
    keep = set(filter_repo_objects(list(files), allow_patterns=include, ignore_patterns=exclude))
    return {k: v for k, v in files.items() if k in keep}


def step(name, fn):
    try:
        detail = fn()
        print(f"PASS {name}" + (f" ({detail})" if detail else ""))
        return 0
    except Exception as e:  # report and go on: one device run must say everything
        traceback.print_exc(file=sys.stderr)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"FAIL {name}: {type(e).__name__}: {msg[:400]}")
        return 1


# ---- steps ---------------------------------------------------------------


def py_download(a):
    """hf download / snapshot_download of the fake Hub, verified against the source."""
    import huggingface_hub
    from huggingface_hub import snapshot_download, scan_cache_dir

    src = source_files(a["src"])
    rc = 0

    def cli_cache():
        code, out, _ = hf_cli("download", a["repo"], "--cache-dir", a["c1"])
        assert code == 0, f"hf download exited {code}"
        snap = printed_path(out)
        same("hf download (cache)", tree_files(snap), src)
        return f"huggingface_hub {huggingface_hub.__version__}, {len(src)} files"

    rc |= step("python: hf download into the cache", cli_cache)

    def cli_local_include():
        inc = ["*.json", "sub/"]
        code, _, _ = hf_cli("download", a["repo"], "--local-dir", a["l1"], "--include", inc[0], "--include", inc[1])
        assert code == 0, f"hf download exited {code}"
        want = filtered(src, include=inc)
        same("hf download --local-dir --include", tree_files(a["l1"], skip_cache=True), want)
        with open(os.path.join(a["out"], "py-include.json"), "w") as f:
            json.dump(sorted(want), f)
        return f"{len(want)} files match {inc}"

    rc |= step("python: hf download --local-dir --include", cli_local_include)

    def cli_revision():
        code, out, _ = hf_cli("download", a["repo"], "config.json", "--revision", a["commit"], "--cache-dir", a["c1b"])
        assert code == 0, f"hf download exited {code}"
        p = printed_path(out)
        assert sha256_file(p) == src["config.json"], "config.json differs"
        assert f"/snapshots/{a['commit']}/" in p, f"not under the commit's snapshot: {p}"

    rc |= step("python: hf download FILE --revision COMMIT", cli_revision)

    def snapshot():
        snap = snapshot_download(a["repo"], cache_dir=a["c2"])
        same("snapshot_download", tree_files(snap), src)
        info = scan_cache_dir(a["c2"])
        assert not info.warnings, f"scan_cache_dir warnings: {info.warnings}"
        code, _, _ = hf_cli("cache", "verify", a["repo"], "--cache-dir", a["c2"], "--fail-on-missing-files", "--fail-on-extra-files")
        assert code == 0, f"hf cache verify exited {code}"

    rc |= step("python: snapshot_download + scan_cache_dir + hf cache verify", snapshot)

    def private():
        from huggingface_hub.utils import RepositoryNotFoundError
        snap = snapshot_download(a["private"], cache_dir=a["c4"], token=a["token"])
        same("private snapshot_download", tree_files(snap), source_files(a["privsrc"]))
        try:
            snapshot_download(a["private"], cache_dir=a["c5"], token=False)
        except RepositoryNotFoundError:
            return "anonymous: RepositoryNotFoundError"
        raise AssertionError("anonymous download of a private repository succeeded")

    rc |= step("python: private repository with and without token", private)
    return rc


def check_qpack_cache(a):
    """A cache written by qpack download, read by the official tools."""
    from huggingface_hub import scan_cache_dir

    src = source_files(a["src"])
    rc = 0

    def scan():
        info = scan_cache_dir(a["c3"])
        assert not info.warnings, f"scan_cache_dir warnings: {info.warnings}"
        repos = [r for r in info.repos if r.repo_id == a["repo"]]
        assert len(repos) == 1, f"repos found: {[r.repo_id for r in info.repos]}"
        revs = list(repos[0].revisions)
        assert len(revs) == 1 and revs[0].commit_hash == a["commit"], f"revisions {[r.commit_hash for r in revs]}"
        assert set(revs[0].refs) == {"main"}, f"refs {revs[0].refs}"
        assert len(revs[0].files) == len(src), f"{len(revs[0].files)} files, want {len(src)}"
        return f"{len(revs[0].files)} files, refs {sorted(revs[0].refs)}, {repos[0].size_on_disk} bytes"

    rc |= step("python: scan_cache_dir on qpack's cache (no warnings)", scan)

    def verify():
        code, _, _ = hf_cli("cache", "verify", a["repo"], "--cache-dir", a["c3"], "--fail-on-missing-files", "--fail-on-extra-files")
        assert code == 0, f"hf cache verify exited {code}"

    rc |= step("python: hf cache verify on qpack's cache", verify)

    def local_verify():
        code, _, _ = hf_cli("cache", "verify", a["repo"], "--local-dir", a["l2"], "--fail-on-missing-files")
        assert code == 0, f"hf cache verify --local-dir exited {code}"

    rc |= step("python: hf cache verify on qpack's --local-dir", local_verify)
    return rc


def py_offline(a):
    """HF_HUB_OFFLINE=1: the official client resolves qpack's cache."""
    from huggingface_hub import snapshot_download, hf_hub_download
    from huggingface_hub import constants

    src = source_files(a["src"])

    def offline():
        assert constants.HF_HUB_OFFLINE, "HF_HUB_OFFLINE not in effect"
        snap = snapshot_download(a["repo"], cache_dir=a["c3"])
        assert snap.endswith(a["commit"]), f"snapshot {snap}"
        same("offline snapshot_download", tree_files(snap), src)
        p = hf_hub_download(a["repo"], "sub/dir/generation_config.json", cache_dir=a["c3"])
        assert sha256_file(p) == src["sub/dir/generation_config.json"]
        return snap

    return step("python offline: snapshot_download + hf_hub_download from qpack's cache", offline)


def py_localdir_reuse(a):
    """hf download --local-dir over a directory qpack filled: nothing is refetched."""
    def reuse():
        before = {}
        for root, _, files in os.walk(a["l2"]):
            for n in files:
                p = os.path.join(root, n)
                if "/.cache/" not in p:
                    before[p] = os.stat(p).st_mtime_ns
        code, _, _ = hf_cli("download", a["repo"], "--local-dir", a["l2"])
        assert code == 0, f"hf download exited {code}"
        changed = [os.path.relpath(p, a["l2"]) for p, t in before.items() if os.stat(p).st_mtime_ns != t]
        assert not changed, f"re-downloaded: {changed}"
        same("local dir", tree_files(a["l2"], skip_cache=True), source_files(a["src"]))
        return f"{len(before)} files kept as qpack wrote them"

    return step("python: hf download --local-dir reuses qpack's files and metadata", reuse)


def check_qpack_json(a):
    """qpack's --json outputs against the source and against Python's filters."""
    src = source_files(a["src"])
    rc = 0

    def online():
        with open(a["qjson"]) as f:
            res = json.load(f)
        got = {f["path"]: f for f in res["files"]}
        assert set(got) == set(src), f"files {sorted(got)}"
        for p, fr in got.items():
            if fr.get("lfs"):
                assert fr["sha256"] == src[p], f"{p}: sha256 {fr['sha256']}"
            assert fr["status"] == "downloaded", f"{p}: {fr['status']}"
            assert sha256_file(fr["local_path"]) == src[p], p
        assert res["commit"] == a["commit"]
        return f"{len(got)} files, {res['downloaded_bytes']} bytes in {res['elapsed_seconds']:.2f}s"

    rc |= step("qpack download --json into a fresh cache", online)

    def offline_py_cache():
        with open(a["qoffjson"]) as f:
            res = json.load(f)
        got = {f["path"]: f for f in res["files"]}
        assert set(got) == set(src), f"files {sorted(got)}"
        for p, fr in got.items():
            assert fr["status"] == "cached", p
            assert sha256_file(fr["local_path"]) == src[p], p
            if fr.get("sha256"):
                assert fr["sha256"] == src[p], p
        assert res["commit"] == a["commit"] and res["offline"], res
        return f"{len(got)} files from the Python-written cache"

    rc |= step("qpack download --offline reads the cache snapshot_download wrote", offline_py_cache)

    def include_semantics():
        with open(a["qdry"]) as f:
            res = json.load(f)
        with open(os.path.join(a["out"], "py-include.json")) as f:
            want = json.load(f)
        got = sorted(f["path"] for f in res["files"])
        assert got == want, f"qpack selected {got}, Python {want}"
        return f"same {len(got)} files"

    rc |= step("qpack --include selects what hf download --include selects", include_semantics)
    return rc


def check_log(a):
    """The token never reached the CDN host; both clients used the CDN for LFS files."""
    def log():
        n_cdn = n_cdn_py = n_cdn_q = 0
        with open(a["log"]) as f:
            for line in f:
                r = json.loads(line)
                if r["Role"] != "cdn":
                    continue
                n_cdn += 1
                assert not r["Auth"], f"Authorization sent to the CDN: {r}"
                ua = r.get("UserAgent", "")
                n_cdn_q += ua.startswith("qpack/")
                n_cdn_py += "huggingface_hub" in ua or "hf_hub" in ua
        assert n_cdn_q > 0 and n_cdn_py > 0, f"CDN requests: qpack {n_cdn_q}, python {n_cdn_py}"
        return f"{n_cdn} CDN requests (qpack {n_cdn_q}, python {n_cdn_py}), none with Authorization"

    return step("request log: no Authorization ever reached the CDN host", log)


STEPS = {
    "py-download": py_download,
    "qpack-cache": check_qpack_cache,
    "py-offline": py_offline,
    "py-localdir-reuse": py_localdir_reuse,
    "qpack-json": check_qpack_json,
    "log": check_log,
}

if __name__ == "__main__":
    args = json.loads(os.environ["HUBCHECK_ARGS"])
    name = sys.argv[1]
    try:
        sys.exit(STEPS[name](args))
    except Exception as e:  # an import or setup failure: still one FAIL line
        traceback.print_exc(file=sys.stderr)
        print(f"FAIL {name}: {type(e).__name__}: {str(e)[:400]}")
        sys.exit(1)
