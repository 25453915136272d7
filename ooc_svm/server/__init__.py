"""The warm server (:mod:`.server`, ``python -m ooc_svm.server``) and the ``ooc-svm``
process's link to it (:mod:`.server_link`). The package imports neither: the link sits at the
bottom of the layers and loads with the command, the server at the top."""
