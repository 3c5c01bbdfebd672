"""The virtual shell behind the OS environment: parser (syntax), interpreter, text tools, awk."""
