"""The toolkit's version: what a build's manifest records and what the doors announce (Wyoming's info, MCP's
server), kept below every wing so none reaches back up to the package root for it."""

VERSION = "0.1.0"
