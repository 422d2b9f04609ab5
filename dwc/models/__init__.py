"""Policy models: observation encoding, LUT layers, actor heads."""
from dwc.models.actors import ActorConfig, DWCActor, GroupSum, MLPActor, build_actor
from dwc.models.encoding import ObsNormalizer, Thermometer, thermometer_thresholds
from dwc.models.lut import LUTLayer
from dwc.models.lut_efd import efd_matrix

__all__ = ["ActorConfig", "DWCActor", "GroupSum", "MLPActor", "build_actor", "ObsNormalizer",
           "Thermometer", "thermometer_thresholds", "LUTLayer", "efd_matrix"]
