"""Site configs: where they are found, how they are loaded, layered and validated."""

#: The environment variable that picks the site when ``--site`` is not given. Defined here, in
#: the package's light ``__init__``, so the root command can name it without loading the rest.
SITE_ENV = "HPCJOBS_SITE"
#: The built-in site config of the local sandbox (``site-configs/sandbox.yaml``).
SANDBOX_SITE = "sandbox"
