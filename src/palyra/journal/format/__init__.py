"""The journal's format room: record and key layouts, bundle lines, the checkpoint key.

Pure encode/decode over bytes (and the key file); nothing here opens LMDB.

Other packages use ``palyra.journal`` only; these modules are the journal's own.
"""
