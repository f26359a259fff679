"""Repro bundles: a failing example of a kernel check as a folder that runs with torch and fla alone
(pathmdn_verify.repro.bundle), for `verify repro` (pathmdn_verify.repro.make) and for `verify bisect --bundle`,
which judges each commit by the bundle's exit status (pathmdn_verify.repro.run)."""
