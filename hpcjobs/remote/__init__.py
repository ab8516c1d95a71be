"""Remote use over SSH: run Slurm commands and copy files on a cluster's login node.

Everything goes through paramiko, imported only when a connection is opened, so importing this
package stays cheap. Host keys are always verified: against the user's ``known_hosts``, the
system one, and keys pinned in the site config. Unknown and changed keys are refused.

Modules:

* :mod:`~hpcjobs.remote.runner`: :class:`SshRunner` (a :class:`hpcjobs.runner.Runner`) and
  :func:`connect_runner`, which turns ``[user@]host[:port]`` into one.
* :mod:`~hpcjobs.remote.hostspec`: parsing and checking of host arguments.
* :mod:`~hpcjobs.remote.sshconfig`: ``~/.ssh/config`` resolution.
* :mod:`~hpcjobs.remote.hostkeys`: ``known_hosts`` and pinned keys, fingerprints.
* :mod:`~hpcjobs.remote.trust`: fetch a host's key and record it on purpose.
* :mod:`~hpcjobs.remote.connect`, :mod:`~hpcjobs.remote.files`: the paramiko side.
"""
