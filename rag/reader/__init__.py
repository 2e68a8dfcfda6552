"""Reading a docs folder: which files are Sources, who may read them, and each file as blocks and heading-aware chunks with exact line ranges."""
