"""What test modules share by import (fixtures stay in conftest.py): running the entry points, the shared
builds, served servers, clips and upstream's twins. Importable as `helpers` because pytest puts tests/, the
conftest's folder, on sys.path."""
