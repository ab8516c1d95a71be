"""File operations over SFTP with safe permissions: modes are applied when a file is created.

A file is written to a hidden temporary name created exclusively with its final mode, then
renamed over the target (``posix-rename``), so nobody can open it while it is briefly more
permissive, and readers never see half a file. This module imports paramiko.
"""

from __future__ import annotations

import posixpath
import secrets
import stat
from typing import Any, cast

import paramiko
from paramiko.sftp import CMD_HANDLE, CMD_OPEN, SFTP_FLAG_CREATE, SFTP_FLAG_EXCL, SFTP_FLAG_WRITE
from paramiko.sftp_attr import SFTPAttributes
from paramiko.sftp_file import SFTPFile

_CHUNK = 32768


def makedirs(sftp: paramiko.SFTPClient, path: str, mode: int) -> list[str]:
    """Create ``path`` and any missing parents, each new folder with ``mode``.

    Folders that already exist keep their mode.

    Returns:
        The folders created, outermost first.

    Raises:
        OSError: A component exists and is not a folder, or the server refused (the SFTP
            error, for example :class:`PermissionError`).
    """
    created: list[str] = []
    current = "/" if path.startswith("/") else ""
    for part in [p for p in path.split("/") if p and p != "."]:
        current = posixpath.join(current, part) if current else part
        try:
            info = sftp.stat(current)
        except FileNotFoundError:
            try:
                sftp.mkdir(current, mode)
            except OSError as exc:
                try:
                    info = sftp.stat(current)  # someone else created it meanwhile
                except OSError:
                    raise exc from None
            else:
                created.append(current)
                _fix_mode(sftp, current, mode)
                continue
        if not stat.S_ISDIR(info.st_mode or 0):
            raise NotADirectoryError(f"{current} exists and is not a folder")
    return created


def write_bytes(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path``: a new file with ``mode`` from its first byte, then renamed.

    Raises:
        OSError: The server refused (missing folder, permission denied, ...).
    """
    folder, name = posixpath.split(path)
    temp = posixpath.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    handle = _create_exclusive(sftp, temp, mode)
    try:
        with handle:
            current = handle.stat().st_mode
            if current is not None and stat.S_IMODE(current) != mode:
                handle.chmod(mode)  # the server's umask removed bits we asked for
            handle.set_pipelined(True)
            for start in range(0, len(data), _CHUNK):
                handle.write(data[start : start + _CHUNK])
        sftp.posix_rename(temp, path)
    except BaseException:
        _remove_quietly(sftp, temp)
        raise


def read_bytes(sftp: paramiko.SFTPClient, path: str) -> bytes:
    """The contents of ``path``."""
    with sftp.open(path, "rb") as handle:
        handle.prefetch()
        return handle.read()


def _create_exclusive(sftp: paramiko.SFTPClient, path: str, mode: int) -> SFTPFile:
    """Open a new file (it must not exist yet), asking the server to create it with ``mode``.

    paramiko's ``open`` sends no attributes, so the server would create the file with its
    default mode; this sends the permissions in the OPEN request itself.
    """
    attrs = SFTPAttributes()
    attrs.st_mode = mode
    client = cast(Any, sftp)
    flags = SFTP_FLAG_CREATE | SFTP_FLAG_EXCL | SFTP_FLAG_WRITE
    kind, msg = client._request(CMD_OPEN, client._adjust_cwd(path), flags, attrs)
    if kind != CMD_HANDLE:
        raise OSError(f"the SFTP server did not open {path}")
    return SFTPFile(sftp, msg.get_binary(), "wb", -1)


def _fix_mode(sftp: paramiko.SFTPClient, path: str, mode: int) -> None:
    info = sftp.stat(path)
    if info.st_mode is not None and stat.S_IMODE(info.st_mode) != mode:
        sftp.chmod(path, mode)


def _remove_quietly(sftp: paramiko.SFTPClient, path: str) -> None:
    try:
        sftp.remove(path)
    except OSError:
        return
