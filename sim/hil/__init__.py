"""Hardware in the loop: the host side of the UART policy link. ``protocol`` encodes and decodes its
frames, ``host`` runs MuJoCo episodes with every action computed by a board (or its simulation),
``board_sim`` serves a simulated board on a socket. The link's hardware is ``dwc.rtl.link``."""
