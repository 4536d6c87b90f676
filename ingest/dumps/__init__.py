"""msprobe dump reading, semantic boundaries, exact gate, ULP and stub rounds."""
