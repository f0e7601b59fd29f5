// Training text of the tiny BPE tokenizer: original prose written for this project about a
// made-up river city, its history and some everyday science. Changing it changes every tiny model's
// vocabulary, so treat it as frozen.
#include "tokenizer/tiny_bpe.hpp"

namespace evalrun {

std::string_view tiny_bpe_corpus() {
  static constexpr std::string_view kCorpus = R"corpus(The city of Marrowford grew up on both banks of a slow, wide river. For most of its history the river was the city's main road: boats carried grain, timber, wool and salt down to the sea, and came back with iron, glass, tea and news. The old town still stands on the north bank, where the water is deep enough for large boats to reach the quays. The first bridge was built of wood in 1148, burned in 1203, and was replaced by a stone bridge of nine arches that is still in use today.

In the summer the river is calm and green, and children swim from the steps below the market. In the spring it can rise by more than 4 metres in a single week, when snow melts in the hills to the west. The great flood of 1867 reached the doors of the cathedral; a brass line on the wall of the town hall shows how high the water came. After that flood the city built a stone wall along the river, planted willows on the low meadows, and dug a second channel to carry the water around the old town. Since then the river has flooded the meadows many times, but it has not entered the streets again.

The people of Marrowford have always liked to measure things. The city keeps a record of the river's height that goes back to 1790, written by hand in long books, one line for every day. On a normal day the river flows at about 120 cubic metres per second; during the flood of 1867 it carried more than 2,400. A small museum near the bridge shows the old gauges, a model of the river, and a map of every bridge, mill and ferry that has stood along its banks.

Water is a remarkable substance. It is one of the few things that we meet every day as a solid, a liquid and a gas. Pure water freezes at 0 degrees Celsius and boils at 100 degrees at sea level, but high in the mountains, where the air is thinner, it boils at a lower temperature. Ice is lighter than liquid water, which is why it floats. If it did not, lakes and rivers would freeze from the bottom up, and the fish that live in them would have a much harder time surviving the winter.

Light from the sun takes about eight minutes to reach the earth. When it passes through drops of rain, it is bent and split into its colours, and we see a rainbow. The sky is blue because the air scatters blue light more than red light; at sunset, when the light travels a longer path through the air, most of the blue is scattered away and the sky turns orange and red. These are simple ideas, but it took people a long time to understand them, and each step was made by someone who asked a question and then tested the answer.

Scientists learn about the world by making careful observations, forming an idea that could explain them, and then testing that idea with new experiments. A good experiment changes only one thing at a time, so that the result can be traced to its cause. The results are written down, checked by others, and repeated. If a result cannot be repeated, it is not trusted. This slow and patient work is how we came to know that the earth goes around the sun, that living things are made of cells, and that the air we breathe is a mixture of gases.

The university of Marrowford was founded in 1412 by a group of teachers who had left a larger city in the south. At first they taught law, medicine and music in rooms above a bakery. Today the university has more than 30,000 students and a famous school of engineering. Its students built the first electric tram in the region in 1893, and in 1961 they measured the depth of the river at every point between the two bridges, using sound waves sent from a small boat. The map they made is still used by the river pilots.

Every autumn the city holds a fair on the meadows. There are boats with coloured sails, music in the streets, and long tables of bread, cheese, apples and honey. Farmers bring sheep and horses from the hills, and the best animals win ribbons. In the evening there are fireworks over the water, and the whole city comes down to the river to watch them. Some families have not missed a fair in more than a hundred years.

"Where does the river begin?" is a question that every child in Marrowford asks. The answer is not simple. The river is fed by dozens of small streams, each starting as a spring on a hillside or as water draining from a peat bog. The longest of these streams rises 212 kilometres from the sea, near a village called Ashby, and many people say that this is where the river begins. Others say it begins at the lake of Tarn Mere, which is larger and older, though not as far away. Both groups have good reasons, and the argument is friendly.

Rivers shape the land they flow through. Over thousands of years, the water wears away rock and soil and carries it downstream as sand, silt and mud. Where the river slows down, on the inside of a bend or where it meets the sea, it drops what it carries, and new land is built. The meadows around Marrowford are made of this soil, which is why they are so good for farming. In a dry year the farmers can see the old paths of the river as long, curved lines of darker grass.

Today the river is cleaner than it has been for two hundred years. Salmon came back in 1998, after the last of the old factories stopped pouring waste into the water, and otters were seen near the mill in 2006. Each spring volunteers walk the banks to count birds, test the water, and pick up litter. Their reports are posted on the door of the museum, and anyone can read them: the number of herons, the temperature of the water, the amount of oxygen it holds, and a short note about the weather.

If you visit Marrowford, walk across the stone bridge early in the morning, when the mist lies on the water and the city is quiet. Stop in the middle and look west, toward the hills. You will see the river coming toward you, wide and patient, as it has come for ten thousand years. Then turn and look east, toward the sea, and you will see where it is going. It doesn't stop, it won't wait, and it's never quite the same river twice; that, people here say, is what they love about it.
)corpus";
  return kCorpus;
}

}  // namespace evalrun
