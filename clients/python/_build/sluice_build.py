"""sluice_build.py - a PEP 517 build backend for the sluice package, standard library only.

The package is pure Python with no dependencies, so a wheel is a zip of sluice/*.py and
its .dist-info (METADATA, WHEEL, RECORD with sha256 digests, as the wheel format says);
the machine needs neither setuptools nor wheel, and nothing is fetched.
"""
import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME, VERSION = "sluice", "0.2.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"
METADATA = """Metadata-Version: 2.1
Name: sluice
Version: %s
Summary: Client of sluiced: leases before model calls, action-limit checks
Requires-Python: >=3.11
""" % VERSION
WHEEL = """Wheel-Version: 1.0
Generator: sluice_build
Root-Is-Purelib: true
Tag: %s
""" % TAG


def _sources():
    pkg = os.path.join(ROOT, NAME)
    return sorted(os.path.join(NAME, f) for f in os.listdir(pkg)
                  if f.endswith(".py") or f == "py.typed")


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _dist_info():
    return "%s-%s.dist-info" % (NAME, VERSION)


def _write_wheel(directory, files):
    name = "%s-%s-%s.whl" % (NAME, VERSION, TAG)
    records = []
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
            records.append("%s,%s,%d" % (arc, _digest(data), len(data)))
        record = _dist_info() + "/RECORD"
        records.append(record + ",,")
        z.writestr(record, "\n".join(records) + "\n")
    return name


def _package_files():
    files = []
    for rel in _sources():
        with open(os.path.join(ROOT, rel), "rb") as f:
            files.append((rel.replace(os.sep, "/"), f.read()))
    return files


def _meta_files():
    d = _dist_info()
    return [(d + "/METADATA", METADATA.encode()), (d + "/WHEEL", WHEEL.encode())]


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    for arc, data in _meta_files():
        with open(os.path.join(metadata_directory, arc), "wb") as f:
            f.write(data)
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files() + _meta_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """An editable install: a .pth file that puts this directory on sys.path."""
    return _write_wheel(wheel_directory, [(NAME + "_editable.pth", (ROOT + "\n").encode())] +
                        _meta_files())


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/sluice_build.py"] + _sources():
            t.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
